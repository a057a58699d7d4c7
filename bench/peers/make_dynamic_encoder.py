#!/usr/bin/python3
"""A pre-norm Transformer encoder layer with dynamic batch and sequence axes, in ONNX
(Debian's python3-onnx): make_dynamic_encoder.py OUT.onnx"""
import sys
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

E, H, F = 64, 4, 128
D = E // H
rng = np.random.default_rng(0)
inits = []
def w(name, *shape, scale=0.1):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name
def c(name, values, dtype=np.int64):
    inits.append(numpy_helper.from_array(np.array(values, dtype), name))
    return name
nodes = []
def n(op, ins, out, **attrs):
    nodes.append(helper.make_node(op, ins, [out], **attrs))
    return out
x = "x"
ln1 = n("LayerNormalization", [x, w("g1", E, scale=1), w("b1", E)], "ln1", axis=-1, epsilon=1e-5)
def proj(name):
    return n("Add", [n("MatMul", [ln1, w(name + "_w", E, E)], name + "_mm"), w(name + "_b", E)], name)
q, k, v = proj("q"), proj("k"), proj("v")
shape4 = c("shape4", [0, 0, H, D])
def heads(t):
    return n("Transpose", [n("Reshape", [t, shape4], t + "_r")], t + "_h", perm=[0, 2, 1, 3])
qh, kh, vh = heads(q), heads(k), heads(v)
kt = n("Transpose", [kh], "kt", perm=[0, 1, 3, 2])
scores = n("Mul", [n("MatMul", [qh, kt], "qk"), c("scale", 1 / np.sqrt(D), np.float32)], "scores")
att = n("MatMul", [n("Softmax", [scores], "p", axis=-1), vh], "att")
merged = n("Reshape", [n("Transpose", [att], "att_t", perm=[0, 2, 1, 3]), c("shape3", [0, 0, E])], "merged")
o = n("Add", [n("MatMul", [merged, w("o_w", E, E)], "o_mm"), w("o_b", E)], "o")
r1 = n("Add", [x, o], "r1")
ln2 = n("LayerNormalization", [r1, w("g2", E, scale=1), w("b2", E)], "ln2", axis=-1, epsilon=1e-5)
h1 = n("Relu", [n("Add", [n("MatMul", [ln2, w("f1", E, F)], "f1_mm"), w("f1b", F)], "f1_a")], "f1_r")
h2 = n("Add", [n("MatMul", [h1, w("f2", F, E)], "f2_mm"), w("f2b", E)], "f2_a")
y = n("Add", [r1, h2], "y")
g = helper.make_graph(nodes, "encoder",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", E])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", E])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])

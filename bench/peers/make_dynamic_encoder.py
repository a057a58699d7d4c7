#!/usr/bin/python3
"""Transformer encoders with dynamic batch and sequence axes, in ONNX (Debian's
python3-onnx): make_dynamic_encoder.py OUT.onnx [--bert]

Without --bert: one pre-norm encoder layer (width 64, 4 heads) on float
input x [batch, seq, 64]. With --bert: a BERT-style model on token ids
ids [batch, seq]: token and position embeddings (positions from the input's
length, as torch exports them), then 4 post-norm layers of width 256 with 4
heads and GELU (erf) feed-forwards of 1024."""
import sys
try:
    import numpy as np
    import onnx
    from onnx import helper, TensorProto, numpy_helper
except ImportError as missing:
    sys.exit(f"{missing}: install Debian's python3-onnx (apt install python3-onnx)")

rng = np.random.default_rng(0)
inits = []
nodes = []


def w(name, *shape, scale=0.1):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name


def c(name, values, dtype=np.int64):
    inits.append(numpy_helper.from_array(np.array(values, dtype), name))
    return name


def n(op, ins, out, **attrs):
    nodes.append(helper.make_node(op, ins, [out], **attrs))
    return out


def layer(x, p, E, H, F, pre_norm):
    D = E // H

    def norm(t, name):
        return n("LayerNormalization", [t, w(p + name + "_g", E, scale=1), w(p + name + "_b", E)], p + name, axis=-1,
                 epsilon=1e-5)

    def linear(t, name, fan_in, fan_out):
        return n("Add", [n("MatMul", [t, w(p + name + "_w", fan_in, fan_out, scale=1 / np.sqrt(fan_in))],
                           p + name + "_mm"), w(p + name + "_b", fan_out)], p + name)

    ln1 = norm(x, "ln1") if pre_norm else x
    q, k, v = (linear(ln1, name, E, E) for name in ("q", "k", "v"))
    shape4 = c(p + "shape4", [0, 0, H, D])

    def heads(t):
        return n("Transpose", [n("Reshape", [t, shape4], t + "_r")], t + "_h", perm=[0, 2, 1, 3])
    qh, kh, vh = heads(q), heads(k), heads(v)
    kt = n("Transpose", [kh], p + "kt", perm=[0, 1, 3, 2])
    scores = n("Mul", [n("MatMul", [qh, kt], p + "qk"), c(p + "scale", 1 / np.sqrt(D), np.float32)], p + "scores")
    att = n("MatMul", [n("Softmax", [scores], p + "p", axis=-1), vh], p + "att")
    merged = n("Reshape", [n("Transpose", [att], p + "att_t", perm=[0, 2, 1, 3]), c(p + "shape3", [0, 0, E])],
               p + "merged")
    r1 = n("Add", [x, linear(merged, "o", E, E)], p + "r1")
    if not pre_norm:
        r1 = norm(r1, "ln1")
    ln2 = norm(r1, "ln2") if pre_norm else r1
    f1 = linear(ln2, "f1", E, F)
    if pre_norm:
        h1 = n("Relu", [f1], p + "f1_r")
    else:  # GELU as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
        e = n("Erf", [n("Div", [f1, c(p + "sqrt2", np.sqrt(2), np.float32)], p + "f1_s")], p + "f1_e")
        h1 = n("Mul", [n("Mul", [f1, n("Add", [e, c(p + "one", 1, np.float32)], p + "f1_1")], p + "f1_m"),
                       c(p + "half", 0.5, np.float32)], p + "f1_g")
    y = n("Add", [r1, linear(h1, "f2", F, E)], p + "y")
    return y if pre_norm else norm(y, "ln2")


def encoder():
    E = 64
    y = layer("x", "", E, 4, 128, pre_norm=True)
    return y, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", E])], \
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", "seq", E])]


def bert():
    E, V, P = 256, 1000, 128
    tokens = n("Gather", [w("tok_emb", V, E), "ids"], "tok")
    seq = n("Gather", [n("Shape", ["ids"], "ids_shape"), c("one_index", 1)], "seq_len")
    positions = n("Range", [c("zero", 0), seq, c("step", 1)], "positions")
    x = n("Add", [tokens, n("Gather", [w("pos_emb", P, E), positions], "pos")], "emb")
    x = n("LayerNormalization", [x, w("emb_g", E, scale=1), w("emb_b", E)], "emb_ln", axis=-1, epsilon=1e-5)
    for i in range(4):
        x = layer(x, f"l{i}_", E, 4, 1024, pre_norm=False)
    return x, [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])], \
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", E])]


y, inputs, outputs = bert() if "--bert" in sys.argv else encoder()
g = helper.make_graph(nodes, "encoder", inputs, outputs, inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, sys.argv[1])

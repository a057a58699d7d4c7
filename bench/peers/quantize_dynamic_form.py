#!/usr/bin/python3
"""Writes a float ONNX model's MatMuls by constant 2-d weights in the form
onnxruntime.quantization.quantize_dynamic gives them (QOperator, int8
weights, symmetric, one scale per tensor): DynamicQuantizeLinear of the
input, MatMulInteger by the int8 weights, Cast to float, Mul by the product
of the two scales. (ONNX Runtime's Python package is not in Debian; this
writes the same nodes so that its runtime and Kiln's time the same file.)
Usage: quantize_dynamic_form.py IN.onnx OUT.onnx"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

model = onnx.load(sys.argv[1])
graph = model.graph
weights = {t.name: t for t in graph.initializer}
# (torch.onnx.export shares equal weights through Identity nodes)
for node in graph.node:
    if node.op_type == "Identity" and node.input[0] in weights:
        weights[node.output[0]] = weights[node.input[0]]
nodes = []
for node in graph.node:
    w = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) == 2 else None
    if w is None or len(w.dims) != 2 or w.data_type != TensorProto.FLOAT:
        nodes.append(node)
        continue
    values = numpy_helper.to_array(w)
    scale = max(float(np.abs(values).max()), 1e-8) / 127
    p = node.output[0] + "_dq"
    graph.initializer.extend([numpy_helper.from_array(np.round(values / scale).astype(np.int8), p + "_w"),
                              numpy_helper.from_array(np.array(0, np.int8), p + "_w_zero"),
                              numpy_helper.from_array(np.array(scale, np.float32), p + "_w_scale")])
    nodes += [helper.make_node("DynamicQuantizeLinear", [node.input[0]], [p + "_x", p + "_x_scale", p + "_x_zero"]),
              helper.make_node("MatMulInteger", [p + "_x", p + "_w", p + "_x_zero", p + "_w_zero"], [p + "_acc"]),
              helper.make_node("Cast", [p + "_acc"], [p + "_acc_float"], to=TensorProto.FLOAT),
              helper.make_node("Mul", [p + "_x_scale", p + "_w_scale"], [p + "_scale"]),
              helper.make_node("Mul", [p + "_acc_float", p + "_scale"], [node.output[0]])]
del graph.node[:]
graph.node.extend(nodes)
onnx.checker.check_model(model)
onnx.save(model, sys.argv[2])

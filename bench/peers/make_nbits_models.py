#!/usr/bin/python3
"""Writes one LLM projection layer with 4-bit weights in blocks of 32 (com.microsoft's
MatMulNBits, zero points packed, as ONNX Runtime's MatMulNBitsQuantizer and LLM exporters
write it) for a few row counts and both accuracy levels that matter on CPUs: 0 (float32
products) and 4 (the activation rounded to int8 per block). Needs Debian's python3-onnx.
Usage: make_nbits_models.py OUT_DIR [K N]"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    out = sys.argv[1]
    k = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    block, blocks = 32, k // 32
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 16, (n, blocks, block))
    packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)
    scales = (rng.random(n * blocks) * 0.02 + 0.005).astype(np.float32)
    zeros = rng.integers(0, 256, n * ((blocks + 1) // 2)).astype(np.uint8)
    for level in (0, 4):
        node = helper.make_node("MatMulNBits", ["input", "B", "scales", "zero_points"], ["Y"],
                                domain="com.microsoft", K=k, N=n, bits=4, block_size=block, accuracy_level=level)
        graph = helper.make_graph(
            [node], "projection", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["rows", k])],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["rows", n])],
            [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "scales"),
             numpy_helper.from_array(zeros, "zero_points")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                        helper.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        onnx.save(model, os.path.join(out, f"nbits_level{level}.onnx"))


if __name__ == "__main__":
    main()

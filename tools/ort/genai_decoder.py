#!/usr/bin/python3
"""Writes a LLaMA-style decoder in the form onnxruntime-genai's model builder
exports for CPUs: token embeddings by Gather, RMS norms as
SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization, every
projection a 4-bit MatMulNBits (blocks of 32, packed zero points), attention
as GroupQueryAttention with rotary embeddings from cos/sin caches, a SiLU
MLP; seqlens_k and total_sequence_length computed in the graph from the
attention mask. Inputs: input_ids and attention_mask [batch, length] int64,
past_key_values.L.key/value [batch, kv_heads, past, head]; outputs: logits
[batch, length, vocab] and present.L.key/value. The weights are random.
Needs Debian's python3-onnx.
Usage: genai_decoder.py OUT.onnx [--layers N] [--hidden H] [--heads N] [--kv-heads N]
                        [--intermediate I] [--vocab V] [--max-length L] [--accuracy-level 0|4]"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def decoder(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96, max_length=128,
            accuracy_level=0, seed=0):
    """The ModelProto; the sizes are the model's."""
    rng = np.random.default_rng(seed)
    head = hidden // heads
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(array, name))
        return name

    def node(op, inputs, outputs, domain="", **attrs):
        nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0], domain=domain, **attrs))
        return outputs[0]

    def nbits(name, x, k, n):
        """x [.., k] times a random [k, n] in 4 bits, blocks of 32."""
        blocks = k // 32
        codes = rng.integers(0, 16, (n, blocks, 32))
        packed = (codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)).astype(np.uint8)
        scale = 1.0 / np.sqrt(k) / 4.0
        scales = (rng.random(n * blocks) * scale + scale / 2).astype(np.float32)
        zeros = rng.integers(6, 10, (n, blocks + blocks % 2))
        packed_zeros = (zeros[:, 0::2] | (zeros[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
        return node("MatMulNBits", [x, const(name + ".qweight", packed), const(name + ".scales", scales),
                                    const(name + ".qzeros", packed_zeros)], [name],
                    domain="com.microsoft", K=k, N=n, bits=4, block_size=32, accuracy_level=accuracy_level)

    def norm_weight(name, n):
        return const(name + ".weight", (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    # The mask's row sums less one, and its length: what GroupQueryAttention reads.
    node("ReduceSum", ["attention_mask", const("one_axis", np.array([1], np.int64))], ["mask_sum"], keepdims=0)
    node("Sub", ["mask_sum", const("one", np.array(1, np.int64))], ["seqlens_k_int64"])
    node("Cast", ["seqlens_k_int64"], ["seqlens_k"], to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["mask_shape"])
    node("Gather", ["mask_shape", const("one_index", np.array(1, np.int64))], ["total_length_int64"], axis=0)
    node("Cast", ["total_length_int64"], ["total_sequence_length"], to=TensorProto.INT32)

    angles = np.arange(max_length)[:, None] * 10000.0 ** (-np.arange(head // 2)[None, :] * 2.0 / head)
    cos_cache = const("cos_cache", np.cos(angles).astype(np.float32))
    sin_cache = const("sin_cache", np.sin(angles).astype(np.float32))

    embed = const("embed_tokens.weight", (0.5 * rng.standard_normal((vocab, hidden))).astype(np.float32))
    x = node("Gather", [embed, "input_ids"], ["embedded"])
    residual = None
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "length", vocab])]
    for i in range(layers):
        p = f"layers.{i}"
        if residual is None:
            normed = node("SimplifiedLayerNormalization", [x, norm_weight(p + ".input_ln", hidden)],
                          [p + ".input_ln"], axis=-1, epsilon=1e-5)
            residual = x
        else:
            normed, _, _, residual = (node("SkipSimplifiedLayerNormalization",
                                           [x, residual, norm_weight(p + ".input_ln", hidden)],
                                           [p + ".input_ln", "", "", p + ".input_sum"], domain="com.microsoft",
                                           epsilon=1e-5), None, None, p + ".input_sum")
        q = nbits(p + ".q_proj", normed, hidden, heads * head)
        k = nbits(p + ".k_proj", normed, hidden, kv_heads * head)
        v = nbits(p + ".v_proj", normed, hidden, kv_heads * head)
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        present_k, present_v = f"present.{i}.key", f"present.{i}.value"
        for name in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", kv_heads, "past", head]))
        for name in (present_k, present_v):
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", kv_heads, "total", head]))
        attn = node("GroupQueryAttention", [q, k, v, past_k, past_v, "seqlens_k", "total_sequence_length",
                                            cos_cache, sin_cache], [p + ".attn", present_k, present_v],
                    domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, do_rotary=1,
                    scale=1.0 / np.sqrt(head))
        o = nbits(p + ".o_proj", attn, heads * head, hidden)
        normed = node("SkipSimplifiedLayerNormalization", [o, residual, norm_weight(p + ".post_ln", hidden)],
                      [p + ".post_ln", "", "", p + ".post_sum"], domain="com.microsoft", epsilon=1e-5)
        residual = p + ".post_sum"
        gate = nbits(p + ".gate_proj", normed, hidden, intermediate)
        up = nbits(p + ".up_proj", normed, hidden, intermediate)
        silu = node("Mul", [gate, node("Sigmoid", [gate], [p + ".gate_sigmoid"])], [p + ".silu"])
        x = nbits(p + ".down_proj", node("Mul", [silu, up], [p + ".mlp_in"]), intermediate, hidden)
    final = node("SkipSimplifiedLayerNormalization", [x, residual, norm_weight("norm", hidden)],
                 ["final_norm", "", "", "final_sum"], domain="com.microsoft", epsilon=1e-5)
    nbits("logits", final, hidden, vocab)
    graph = helper.make_graph(nodes, "decoder", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--intermediate", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=96)
    parser.add_argument("--max-length", type=int, default=128, help="positions the rotary caches hold")
    parser.add_argument("--accuracy-level", type=int, default=0)
    a = parser.parse_args()
    onnx.save(decoder(a.layers, a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab, a.max_length,
                      a.accuracy_level), a.out)


if __name__ == "__main__":
    main()

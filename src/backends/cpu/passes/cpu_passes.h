#pragma once
// The CPU backend's graph passes: they make CPU kernels (oneDNN post-ops,
// blocked layouts with algorithms chosen by timing, packed weights, one
// loop for an elementwise chain), so only graphs whose values live on the
// CPU get them (registered in cpu_passes.cpp). Each returns a one-line
// summary of what it changed ("" when nothing), for the compile report.
#include <string>

#include "graph/ir.h"
#include "graph/passes.h"

namespace kiln::graph {

std::string fuse_linear_residual(Graph& g);  // add(linear(x), r) [+ relu]: one oneDNN call accumulating into r
std::string fuse_conv_activation(Graph& g);  // conv2d + relu (a oneDNN post-op), linear + relu
std::string use_packed_linear_weights(Graph& g);  // inference, up to 512 rows: linear layers on weights packed once
// Inference: float32 lstm, gru and rnn on W_ih packed for few rows, the biases summed and W_hh in panels.
std::string use_prepared_recurrent_weights(Graph& g);
// Inference: attention whose output a transpose and a copy put heads-interleaved writes it so itself.
std::string write_attention_heads_interleaved(Graph& g);
// Inference: blocked activations between convolutions; the algorithms timed
// unless the options say not to.
std::string choose_conv_layouts(Graph& g, const PassOptions& options);
std::string choose_training_conv_layouts(Graph& g, const PassOptions& options);  // training graphs, gradients included
std::string pool_values_only(Graph& g);  // max pools on plain float32 or 8-bit data whose indices nobody reads
// int8 convolutions on weights reordered once, their activations channels-last where only they and
// elementwise ops touch them (int8_layouts.cpp).
std::string use_int8_layouts(Graph& g);
// Inference: a float32 layer norm whose result is quantized (and that
// quantization dequantized) as one kernel, row by row (norm_quantize.cpp).
std::string fuse_layer_norm_quantize(Graph& g);
// Inference: x * rsqrt(mean(x * x) + eps) [* w] over the last axis, in
// float32, as one kernel row by row (rms_norm_rows.cpp).
std::string fuse_rms_norms(Graph& g);
// Inference: where(c1, a, where(c2, b, z)) as one pass (nested_where.cpp).
std::string fuse_nested_wheres(Graph& g);

// A view, or a permute that moves only axes of size 1, which keeps its
// input's elements in their order (onednn_fusion.cpp): folds of a residual
// add follow a product's result through them.
bool keeps_element_order(const Graph& g, const Node& n);

}  // namespace kiln::graph

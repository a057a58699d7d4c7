#pragma once
// Graph-to-graph rewrites. Each returns a one-line summary of what it changed
// ("" when nothing), for the compile report.
#include <string>

#include "graph/ir.h"

namespace kiln::graph {

std::string eliminate_dead_code(Graph& g);
std::string eliminate_common_subexpressions(Graph& g);
std::string fold_constants(Graph& g);
std::string simplify_algebra(Graph& g);
std::string fold_batch_norm(Graph& g);       // inference graphs only
// Inference: a view back to the shape a view came from is gone, also around
// an elementwise op (the rank lift of a 1-d convolution's ReLU), so the
// 4-d values between convolutions keep their layouts.
std::string fold_views(Graph& g);
// Inference: a convolution (constant weights) whose outer kernel taps read
// only padding at every output position (a dilation as large as the input:
// DeepLab's atrous pyramid at small sizes) keeps the taps that reach the input.
std::string drop_taps_in_padding(Graph& g);
// Inference: a zero pad of H and W read only by an average pool becomes the
// pool's padding (counted in its averages), as PyTorch's exports split it.
std::string fold_padding_into_pools(Graph& g);
// Inference: x * 0.5 * (1 + erf(x / √2)), as exports write GELU, is one gelu.
std::string recognize_gelu(Graph& g);
// A 1x1 convolution of a one-pixel input with constant weights
// (squeeze-and-excitation's) -> view, linear, view (the CPU's inference
// graphs, for those its blocked layouts leave plain).
std::string one_pixel_convolutions_as_linear(Graph& g);
std::string matmul_bias_to_linear(Graph& g);  // inference: matmul(x, W) + b with constants -> linear(x, W^T, b)
// Inference: a constant factor per output feature (or one for all) times a
// linear layer's output, also through permutes, goes into its weights and bias.
std::string fold_scales_into_linears(Graph& g);
std::string fuse_conv_bias_grad(Graph& g);   // sum(grad, N/H/W) into conv2d_weight_grad
std::string fuse_pool_relu_grad(Graph& g);   // relu_backward after max_pool2d_backward: one pass
std::string merge_parallel_linears(Graph& g);  // inference: Q/K/V-style projections of one input, one GEMM
std::string fuse_attention(Graph& g);  // inference: matmul, scale, mask, softmax, matmul -> one attention op

// What a compilation asks of the passes, beside the graph.
struct PassOptions {
  // Passes may choose layouts and kernels by timing them on this machine;
  // off, they follow fixed rules, so the same graph comes out on every run.
  bool timed_choices = true;
  // The graph also runs at other batch sizes (a dynamic axis 0): choices
  // that depend on the batch size are made per size class as it runs.
  bool dynamic_batch = false;
};

// The passes every graph gets, whatever its backend: they rewrite registry
// ops into registry ops. Then come the passes of the graph's backend (its
// fusions, layouts and algorithm choices, which make kernels of its own),
// and last the dead code pass again.
using PassFn = std::string (*)(Graph&, const PassOptions&);
// A pass that needs no options, as a PassFn.
template <std::string (*F)(Graph&)>
std::string plain(Graph& g, const PassOptions&) {
  return F(g);
}
struct Pass {
  enum When { Always, Inference, Training };
  const char* name;
  PassFn run;
  When when = Always;
};
const std::vector<Pass>& generic_passes();
// A backend's own passes, registered when its library loads (the CPU's:
// src/backends/cpu/passes); none for a backend that registers none.
void register_backend_passes(DeviceType backend, std::vector<Pass> passes);
const std::vector<Pass>& backend_passes(DeviceType backend);

}  // namespace kiln::graph

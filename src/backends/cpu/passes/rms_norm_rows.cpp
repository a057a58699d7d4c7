// Inference: an RMS norm written as ops (x * rsqrt(mean(x * x) + eps) * w,
// as ONNX's RMSNormalization is read, or PyTorch's exports with x ** 2 and
// 1 / sqrt) as one kernel that finishes each row while it is in the L1
// cache. In an 8-layer decoder a decoded token's 17 norms were 68 kernels
// of a few hundred values each, their launches costing more than their
// arithmetic: 55 us a token, 8 as 17 kernels.
#include <cmath>
#include <optional>

#include "backends/cpu/norm_rows.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {

struct RmsNorm {
  int x = -1, weight = -1;  // weight: -1 where the norm has none
  double eps = 0;
  int last = -1;              // the node whose result is the norm's
  std::vector<int> consumed;  // the other nodes the kernel replaces
};

// The node reading value `id`, when it is the only reader and has that op.
int only_reader(const Graph& g, const std::vector<int>& uses, const std::vector<std::vector<int>>& readers, int id,
                const char* op) {
  if (uses[id] != 1 || readers[id].size() != 1) return -1;
  const int at = readers[id][0];
  return g.nodes[at].is_op(op) ? at : -1;
}

// The other input of a two-input node than `id` (-1 if both are `id`).
int other_input(const Node& n, int id) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == id && n.inputs[1] != id) return n.inputs[1];
  if (n.inputs[1] == id && n.inputs[0] != id) return n.inputs[0];
  return -1;
}

// The norm whose mean of squares `mean_at` is, or nullopt.
std::optional<RmsNorm> match(const Graph& g, const std::vector<int>& uses, const std::vector<std::vector<int>>& readers,
                             const std::vector<bool>& written, int mean_at) {
  const Node& mean = g.nodes[mean_at];
  const Value& ms = g.values[mean.outputs[0]];
  const Shape& shape = ms.meta.shape;
  const auto axes = mean.attrs.get_ints("axes", {});
  if (!mean.attrs.get_bool("keepdim", false) || shape.empty() || axes.size() != 1 ||
      (axes[0] != -1 && axes[0] != static_cast<int64_t>(shape.size()) - 1) || ms.meta.dtype != DType::Float32)
    return std::nullopt;
  const int squares = mean.inputs[0];
  const Value& sq = g.values[squares];
  if (sq.kind != ValueKind::Result || uses[squares] != 1) return std::nullopt;
  // x * x, or x ** 2 (PyTorch's x.pow(2)).
  const Node& square = g.nodes[sq.producer];
  if (square.inputs.size() != 2 || !((square.is_op("mul") && square.inputs[0] == square.inputs[1]) ||
                                     (square.is_op("pow") && constant_scalar(g, square.inputs[1]) == 2.0)))
    return std::nullopt;
  RmsNorm r;
  r.x = square.inputs[0];
  const Shape& x_shape = g.values[r.x].meta.shape;
  // (x written in place between the ops would be read later by the kernel)
  if (x_shape.size() != shape.size() || x_shape.back() <= 0 || written[r.x]) return std::nullopt;
  const int add_at = only_reader(g, uses, readers, mean.outputs[0], "add");
  if (add_at < 0) return std::nullopt;
  const int eps = other_input(g.nodes[add_at], mean.outputs[0]);
  r.eps = eps >= 0 ? constant_scalar(g, eps) : std::nan("");
  if (std::isnan(r.eps)) return std::nullopt;
  r.consumed = {sq.producer, mean_at, add_at};
  // x * rsqrt(v), x * (1 / sqrt(v)) (an exported rsqrt) or x / sqrt(v).
  const int v = g.nodes[add_at].outputs[0];
  int scale_at = -1;
  if (const int rsqrt_at = only_reader(g, uses, readers, v, "rsqrt"); rsqrt_at >= 0) {
    r.consumed.push_back(rsqrt_at);
    scale_at = only_reader(g, uses, readers, g.nodes[rsqrt_at].outputs[0], "mul");
    if (scale_at >= 0 && other_input(g.nodes[scale_at], g.nodes[rsqrt_at].outputs[0]) != r.x) scale_at = -1;
  } else if (const int sqrt_at = only_reader(g, uses, readers, v, "sqrt"); sqrt_at >= 0) {
    const int root = g.nodes[sqrt_at].outputs[0];
    r.consumed.push_back(sqrt_at);
    const int div_at = only_reader(g, uses, readers, root, "div");
    if (div_at >= 0 && g.nodes[div_at].inputs == std::vector<int>{r.x, root}) {
      scale_at = div_at;
    } else if (div_at >= 0 && constant_scalar(g, g.nodes[div_at].inputs[0]) == 1.0) {  // Reciprocal, as read
      r.consumed.push_back(div_at);
      scale_at = only_reader(g, uses, readers, g.nodes[div_at].outputs[0], "mul");
      if (scale_at >= 0 && other_input(g.nodes[scale_at], g.nodes[div_at].outputs[0]) != r.x) scale_at = -1;
    }
  }
  if (scale_at < 0 || g.values[g.nodes[scale_at].outputs[0]].meta.shape != x_shape) return std::nullopt;
  r.last = scale_at;
  // The weight: a constant over the last axis, multiplied in next.
  const int normed = g.nodes[scale_at].outputs[0];
  const int weight_at = only_reader(g, uses, readers, normed, "mul");
  if (weight_at >= 0) {
    const int w = other_input(g.nodes[weight_at], normed);
    const Value* wv = w >= 0 ? &g.values[w] : nullptr;
    if (wv && is_constant(g, w) && wv->meta.dtype == DType::Float32 && wv->tensor.numel() == x_shape.back() &&
        !wv->meta.shape.empty() && wv->meta.shape.back() == x_shape.back() &&
        g.values[g.nodes[weight_at].outputs[0]].meta.shape == x_shape) {
      r.weight = w;
      r.consumed.push_back(scale_at);
      r.last = weight_at;
    }
  }
  return r;
}

// Every size from the tensors (the last axis is the row), so that it serves
// a graph generalized over a batch or a sequence.
CustomKernel rms_norm_kernel(double eps, bool has_weight) {
  return [=](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Tensor x = in[0].contiguous();
    const int64_t m = x.shape().back();
    if (m == 0 || x.numel() == 0) return;
    const Tensor weight = has_weight ? in[1].contiguous() : Tensor();
    const float* px = x.data<float>();
    const float* w = has_weight ? weight.data<float>() : nullptr;
    float* py = out[0].data<float>();
    const int64_t rows = x.numel() / m;
    parallel_for(rows, std::max<int64_t>(1, 4096 / m), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) cpu::rms_norm_row(px + r * m, py + r * m, m, eps, w);
    });
  };
}

}  // namespace

std::string fuse_rms_norms(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const std::vector<std::vector<int>> readers = g.readers();
  const std::vector<bool> written = g.written_through_views();
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!g.nodes[i].is_op("mean") || g.nodes[i].outputs.size() != 1) continue;
    const std::optional<RmsNorm> r = match(g, uses, readers, written, static_cast<int>(i));
    if (!r) continue;
    for (int at : r->consumed) g.nodes[at].removed = true;
    Node& n = g.nodes[r->last];
    n.custom = rms_norm_kernel(r->eps, r->weight >= 0);
    n.any_shape = true;
    n.op = nullptr;
    n.attrs = {};
    n.inputs = {r->x};
    if (r->weight >= 0) n.inputs.push_back(r->weight);
    n.label = "rms_norm";
    ++fused;
  }
  return fused ? std::to_string(fused) + " RMS norms (x * rsqrt(mean(x * x) + eps) * w) as one kernel each" : "";
}

}  // namespace kiln::graph

// Inference: a layer norm whose result is quantized for an int8 layer (a
// quantized Transformer's norms, before its attention and feed-forward
// products) as one kernel: each row normalized, quantized and, where a
// dequantize_linear of that quantization follows (the float residual that
// the feed-forward layer adds), dequantized while it is in the L1 cache,
// bit for bit as the three ops compute it. In an int8 BERT-style encoder
// the three took 23 us a layer as separate passes over its 128 x 256
// values, and 17 as one.
#include "backends/cpu/norm_rows.h"
#include "backends/cpu/onednn_int8.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {

// A per-tensor quantization's constant scale and zero point (inputs 1 and 2).
bool one_constant_scale(const Graph& g, const Node& n) {
  return n.inputs.size() >= 3 && n.inputs[2] >= 0 && is_constant(g, n.inputs[1]) && is_constant(g, n.inputs[2]) &&
         g.values[n.inputs[1]].tensor.numel() == 1 && g.values[n.inputs[2]].tensor.numel() == 1;
}

struct Fused {
  bool keep_norm = false;  // the normalized float result has other readers
  int quantize = -1, dequantize = -1;
  std::vector<int> views;  // order-keeping views between the norm and the quantization
};

// The quantization of norm n's result: read directly or through views that
// keep the element order, each read only by the next; and a dequantization
// of it by the same scale and zero point.
bool find_quantization(const Graph& g, const Node& n, const std::vector<int>& uses,
                       const std::vector<std::vector<int>>& readers, Fused& f) {
  const int y = n.outputs[0];
  for (int reader : readers[y]) {
    std::vector<int> views;
    int at = reader, value = y;
    while (at >= 0 && !g.nodes[at].removed && g.nodes[at].is_view() && keeps_element_order(g, g.nodes[at]) &&
           g.nodes[at].inputs[0] == value) {
      views.push_back(at);
      value = g.nodes[at].outputs[0];
      at = g.sole_reader(value, uses);
    }
    if (at < 0 || !g.nodes[at].is_op("quantize_linear") || g.nodes[at].inputs[0] != value ||
        !one_constant_scale(g, g.nodes[at]))
      continue;
    f.quantize = at;
    f.views = views;
    f.keep_norm = uses[y] > 1;
    break;
  }
  if (f.quantize < 0) return false;
  const Node& q = g.nodes[f.quantize];
  for (int reader : readers[q.outputs[0]]) {
    const Node& d = g.nodes[reader];
    if (!d.is_op("dequantize_linear") || d.inputs[0] != q.outputs[0] || !one_constant_scale(g, d)) continue;
    auto value = [&](int id) { return g.values[id].tensor.contiguous(); };
    if (cpu::onednn::scale_of(value(d.inputs[1])) == cpu::onednn::scale_of(value(q.inputs[1])) &&
        cpu::onednn::zero_point_of(value(d.inputs[2])) == cpu::onednn::zero_point_of(value(q.inputs[2]))) {
      f.dequantize = reader;
      break;
    }
  }
  return true;
}

// Inputs: x, then the weight and the bias where the norm has them.
// Outputs: the normalized rows where kept, their quantization, its
// dequantization where fused.
CustomKernel norm_quantize_kernel(double eps, int64_t m, bool has_weight, bool has_bias, float scale, int32_t zero,
                                  bool keep_norm, bool dequantize) {
  return [=](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Tensor x = in[0].contiguous();
    const Tensor weight = has_weight ? in[1].contiguous() : Tensor(),
                 bias = has_bias ? in[has_weight ? 2 : 1].contiguous() : Tensor();
    const float* w = has_weight ? weight.data<float>() : nullptr;
    const float* b = has_bias ? bias.data<float>() : nullptr;
    const int64_t rows = m > 0 ? x.numel() / m : 0;
    Tensor& q = out[keep_norm ? 1 : 0];
    float* norm = keep_norm ? out[0].data<float>() : nullptr;
    float* dq = dequantize ? out.back().data<float>() : nullptr;
    const float* px = x.data<float>();
    auto run = [&]<typename TQ>(TQ* pq) {
      parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
        std::vector<float> scratch(static_cast<size_t>(norm ? 0 : m));
        for (int64_t r = r0; r < r1; ++r) {
          float* y = norm ? norm + r * m : scratch.data();
          cpu::layer_norm_row(px + r * m, y, m, eps, w, b);
          cpu::quantize_row(y, pq + r * m, m, scale, zero);
          if (dq) cpu::dequantize_row(pq + r * m, dq + r * m, m, scale, zero);
        }
      });
    };
    if (q.dtype() == DType::UInt8)
      run(q.data<uint8_t>());
    else
      run(q.data<int8_t>());
  };
}

}  // namespace

std::string fuse_layer_norm_quantize(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const std::vector<std::vector<int>> readers = g.readers();
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    // Float32 over the last axis, its statistics unread.
    if (!n.is_op("layer_norm") || n.outputs.size() != 3 || uses[n.outputs[1]] || uses[n.outputs[2]] ||
        n.attrs.get_int("normalized_ndim", 1) != 1 || g.values[n.outputs[0]].meta.dtype != DType::Float32)
      continue;
    const Shape& shape = g.values[n.outputs[0]].meta.shape;
    const int64_t m = shape.empty() ? 0 : shape.back();
    bool affine_fits = true;
    for (size_t k = 1; k < 3 && k < n.inputs.size(); ++k)
      if (n.inputs[k] >= 0) affine_fits = affine_fits && numel_of(g.values[n.inputs[k]].meta.shape) == m;
    Fused f;
    if (m <= 0 || !affine_fits || !find_quantization(g, n, uses, readers, f)) continue;
    Node& q = g.nodes[f.quantize];
    const float scale = cpu::onednn::scale_of(g.values[q.inputs[1]].tensor);
    const int32_t zero = cpu::onednn::zero_point_of(g.values[q.inputs[2]].tensor);
    std::vector<int> outputs;
    if (f.keep_norm) outputs.push_back(n.outputs[0]);
    outputs.push_back(q.outputs[0]);
    if (f.dequantize >= 0) outputs.push_back(g.nodes[f.dequantize].outputs[0]);
    std::string label = "layer_norm + quantize";
    if (f.dequantize >= 0) label += " + dequantize";
    const double eps = n.attrs.get_float("eps", 1e-5);
    const bool has_weight = n.inputs.size() > 1 && n.inputs[1] >= 0, has_bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
    std::vector<int> inputs = {n.inputs[0]};
    if (has_weight) inputs.push_back(n.inputs[1]);
    if (has_bias) inputs.push_back(n.inputs[2]);
    for (int at : f.views) g.nodes[at].removed = true;
    q.removed = true;
    if (f.dequantize >= 0) g.nodes[f.dequantize].removed = true;
    n.custom = norm_quantize_kernel(eps, m, has_weight, has_bias, scale, zero, f.keep_norm, f.dequantize >= 0);
    n.op = nullptr;
    n.attrs = {};
    n.inputs = inputs;
    n.outputs = outputs;
    n.label = label;
    for (size_t k = 0; k < outputs.size(); ++k) {
      g.values[outputs[k]].producer = static_cast<int>(i);
      g.values[outputs[k]].output_index = static_cast<int>(k);
    }
    ++fused;
  }
  return fused ? std::to_string(fused) + " layer norms quantized (and dequantized) as they are made" : "";
}

}  // namespace kiln::graph

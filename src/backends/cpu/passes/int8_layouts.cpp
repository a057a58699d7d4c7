// Graph mode's int8 convolutions and matrix products on the CPU: constant
// weights reordered once into the layout oneDNN's int8 kernels read (with
// their compensation terms), and activations kept channels-last (NHWC), the
// layout those kernels read and write, wherever every op that reads or
// writes them is an int8 convolution or an elementwise op over the same shape
// (the quantize/dequantize arithmetic and residual adds between layers, which
// compute the same on any memory order), a max pool of 8-bit values (which
// runs either way), or an int8 average pool or channel concatenation (which
// have channels-last forms). Only at the edges of such a region do values pass
// through plain NCHW. Where the CPU has VNNI, products of 8-bit rows, and
// 1x1 convolutions and depthwise ones of int8 input between channels-last
// layers, run on Kiln's own int8 kernels instead (int8_tiles.h says which),
// on weights packed once for them.
#include <algorithm>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "backends/cpu/onednn_int8.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "backends/cpu/passes/int8_tiles.h"
#include "backends/cpu/passes/layout_pass.h"
#include "backends/cpu/plain_pool.h"
#include "backends/cpu/quantize_layout.h"
#include "backends/cpu/quantized_concat_pool.h"
#include "graph/derived_constants.h"
#include "kiln/grad_mode.h"
#include "ops/conv_attrs.h"
#include "ops/pool_attrs.h"

namespace kiln::graph {
namespace {

struct Int8Conv {
  int node = 0;
  cpu::onednn::QuantizedConvCall call;
  std::vector<float> scales;
  int32_t x_zero = 0, y_zero = 0;
};

// A qlinear op's weights, scales and zero points (inputs 1 to 6) and its
// bias, when it has one, are constants.
bool fixed_operands(const Graph& g, const Node& n) {
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if ((i < 7 || n.inputs[i] >= 0) && !is_constant(g, n.inputs[i])) return false;
  return n.inputs.size() >= 7;
}

// A qlinear_conv2d whose weights, scales, zero points and bias are constants
// and which oneDNN computes exactly.
std::optional<Int8Conv> int8_conv(const Graph& g, int at) {
  const Node& n = g.nodes[at];
  if (n.removed || !n.op || n.op->name != "qlinear_conv2d" || !fixed_operands(g, n)) return std::nullopt;
  const bool bias = n.inputs.size() > 7 && n.inputs[7] >= 0;
  auto tensor = [&](int i) { return g.values[n.inputs[static_cast<size_t>(i)]].tensor.contiguous(); };
  const Tensor w = tensor(3), w_scale = tensor(4);
  const Shape &x = g.values[n.inputs[0]].meta.shape, &ws = w.shape(), &y = g.values[n.outputs[0]].meta.shape;
  Int8Conv c;
  c.node = at;
  c.scales = cpu::onednn::requantization_scales(tensor(1), w_scale, tensor(5));
  c.x_zero = cpu::onednn::zero_point_of(tensor(2));
  c.y_zero = cpu::onednn::zero_point_of(tensor(6));
  const Conv2dAttrs a = Conv2dAttrs::of(n.attrs);
  c.call.shape = {x[0], x[1], x[2], x[3], ws[0], ws[2], ws[3], y[2], y[3], a.stride[0], a.stride[1],
                  a.padding[0], a.padding[1], a.dilation[0], a.dilation[1], a.groups};
  c.call.x_signed = g.values[n.inputs[0]].meta.dtype == DType::Int8;
  c.call.y_signed = g.values[n.outputs[0]].meta.dtype == DType::Int8;
  c.call.per_channel = c.scales.size() > 1;
  c.call.bias = bias;
  c.call.x_zero_point = c.x_zero != 0;
  if (!cpu::onednn::int8_products_exact(w.data<int8_t>(), w.numel(), c.call.x_signed)) return std::nullopt;
  c.call.prepared_weights = true;
  if (cpu::onednn::quantized_weights_bytes(c.call, c.scales.data()) == 0) return std::nullopt;
  return c;
}

// A max pool over 8-bit values whose indices nobody reads (pool_values_only made it).
bool is_eight_bit_pool(const Graph& g, const Node& n) {
  if (n.removed || !n.custom || !n.computes("max_pool2d") || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const DType t = g.values[n.inputs[0]].meta.dtype;
  return t == DType::UInt8 || t == DType::Int8;
}

// A qlinear_concat of 4-d values along their channels.
bool is_channel_concat(const Graph& g, const Node& n) {
  if (!layout::is_op(n, "qlinear_concat") || g.values[n.outputs[0]].meta.shape.size() != 4) return false;
  const int64_t axis = n.attrs.get_int("axis", 1);
  return axis == 1 || axis == -3;
}

struct Int8Matmul {
  int node = 0;
  cpu::onednn::QuantizedMatmulCall call;
  std::vector<float> scales;
  int32_t a_zero = 0, y_zero = 0;
  bool tiles = false;  // on Kiln's own int8 tiles (int8_gemm) rather than oneDNN's primitive
};

// A qlinear_matmul whose b, scales, zero points and bias are constants and
// which Kiln's int8 tiles or oneDNN compute exactly: its b is prepared once too.
std::optional<Int8Matmul> int8_matmul(const Graph& g, int at) {
  const Node& n = g.nodes[at];
  if (n.removed || !n.op || n.op->name != "qlinear_matmul" || !fixed_operands(g, n)) return std::nullopt;
  const bool bias = n.inputs.size() > 7 && n.inputs[7] >= 0;
  auto tensor = [&](int i) { return g.values[n.inputs[static_cast<size_t>(i)]].tensor.contiguous(); };
  const Tensor b = tensor(3), b_scale = tensor(4);
  const int64_t k = b.shape()[0], cols = b.shape()[1], rows = k ? numel_of(g.values[n.inputs[0]].meta.shape) / k : 0;
  if (rows == 0 || cols == 0) return std::nullopt;
  Int8Matmul m;
  m.node = at;
  m.scales = cpu::onednn::requantization_scales(tensor(1), b_scale, tensor(5));
  m.a_zero = cpu::onednn::zero_point_of(tensor(2));
  m.y_zero = cpu::onednn::zero_point_of(tensor(6));
  m.call = {rows, k, cols, g.values[n.inputs[0]].meta.dtype == DType::Int8,
            g.values[n.outputs[0]].meta.dtype == DType::Int8, m.scales.size() > 1, bias, true, {}};
  m.tiles = int8_tiles::take_matmul(k);
  if (m.tiles) return m;
  if (!cpu::onednn::int8_products_exact(b.data<int8_t>(), b.numel(), m.call.a_signed)) return std::nullopt;
  if (cpu::onednn::quantized_matmul_weights_bytes(m.call, m.scales.data()) == 0) return std::nullopt;
  return m;
}

CustomKernel int8_matmul_kernel(const Int8Matmul& m) {
  auto memo = std::make_shared<cpu::onednn::PrimitiveMemo>();
  return [m, memo](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    // Inputs: a, the prepared b, then the bias, the vector and the residual where the call has them.
    const auto& dq = m.call.dequantized;
    const size_t vector_at = m.call.bias ? 3 : 2, residual_at = vector_at + (dq.add_vector ? 1 : 0);
    const bool ran = cpu::onednn::quantized_matmul(
        m.call, in[0].raw_data(), m.a_zero, in[1].raw_data(), m.scales.data(),
        m.call.bias ? in[2].data<int32_t>() : nullptr, m.y_zero, out[0].raw_data(),
        dq.add_vector ? in[vector_at].data<float>() : nullptr, dq.add_residual ? in[residual_at].data<float>() : nullptr,
        memo.get());
    KILN_CHECK(ran, "the int8 matmul primitive chosen at compile time is gone");
  };
}

// The float ops after a quantized matmul that its epilogue can take over
// (QuantizedMatmulCall::Dequantized), each the sole reader of the one before:
// a dequantize_linear by the matmul's own output scale and zero point, then
// an add of a constant float32 vector along the last axis (a bias the
// quantizer left after the dequantization), then an add of a float32 value
// of the result's shape made before the matmul runs (a residual, which a
// separate add reads back with the result: the int8 BERT-style encoder ran
// 2% faster), then a ReLU, then a quantize_linear by one constant scale and
// zero point (a transformer's feed-forward layer: its first product's result
// quantized for the second).
struct DequantizeFold {
  cpu::onednn::QuantizedMatmulCall::Dequantized epilogue;
  std::vector<int> nodes;  // taken over
  int vector = -1;         // the added vector's value
  int residual = -1;       // the added residual's value
  int y = -1;              // the last one's result, which the matmul then writes
};

// Whether a value's elements lie in memory in its shape's row-major order,
// as a kernel reading it raw assumes: a graph input, a kernel's result, or
// an order-keeping view of one (not a slice or a transpose).
bool row_major(const Graph& g, int id) {
  const Value& v = g.values[static_cast<size_t>(id)];
  if (v.kind != ValueKind::Result || v.producer < 0) return true;
  const Node& p = g.nodes[static_cast<size_t>(v.producer)];
  return !p.is_view() || (keeps_element_order(g, p) && row_major(g, p.inputs[0]));
}

// uses: the graph's use counts (a fold changes only its own chain's).
DequantizeFold dequantize_fold(const Graph& g, const Int8Matmul& m, const std::vector<int>& uses) {
  auto sole_reader = [&](int v) { return g.sole_reader(v, uses); };
  auto value_of = [&](int id) { return g.values[id].tensor.contiguous(); };
  const Node& n = g.nodes[static_cast<size_t>(m.node)];
  DequantizeFold f;
  const int dq_at = sole_reader(n.outputs[0]);
  if (dq_at < 0) return f;
  const Node& dq = g.nodes[dq_at];
  if (!layout::is_op(dq, "dequantize_linear") || dq.inputs.size() < 3 || dq.inputs[0] != n.outputs[0] ||
      !is_constant(g, dq.inputs[1]) || !is_constant(g, dq.inputs[2]) || value_of(dq.inputs[1]).numel() != 1 ||
      value_of(dq.inputs[2]).numel() != 1)
    return f;
  const float y_scale = cpu::onednn::scale_of(value_of(n.inputs[5]));
  if (cpu::onednn::scale_of(value_of(dq.inputs[1])) != y_scale ||
      cpu::onednn::zero_point_of(value_of(dq.inputs[2])) != m.y_zero)
    return f;
  f.epilogue.on = true;
  f.epilogue.y_scale = y_scale;
  f.epilogue.y_zero = m.y_zero;
  f.nodes.push_back(dq_at);
  f.y = dq.outputs[0];
  const int add_at = sole_reader(f.y);
  if (add_at >= 0 && layout::is_op(g.nodes[add_at], "add")) {
    const Node& add = g.nodes[add_at];
    const int other = add.inputs.size() != 2 ? -1 : add.inputs[0] == f.y ? add.inputs[1] : add.inputs[0];
    if (other >= 0 && other != f.y && is_constant(g, other) && g.values[other].meta.dtype == DType::Float32 &&
        !g.values[other].meta.shape.empty() && g.values[other].meta.shape.back() == m.call.n &&
        numel_of(g.values[other].meta.shape) == m.call.n &&
        g.values[add.outputs[0]].meta.shape == g.values[f.y].meta.shape) {
      f.epilogue.add_vector = true;
      f.vector = other;
      f.nodes.push_back(add_at);
      f.y = add.outputs[0];
    }
  }
  // The residual add may come after views that keep the order (an
  // attention's output projection, sequence-first, made batch-first for the
  // add): they go with it.
  std::vector<int> views;
  int viewed = f.y;
  for (int at = sole_reader(viewed); at >= 0 && keeps_element_order(g, g.nodes[at]) && g.nodes[at].inputs[0] == viewed;
       at = sole_reader(viewed)) {
    views.push_back(at);
    viewed = g.nodes[at].outputs[0];
  }
  const int residual_at = sole_reader(viewed);
  if (residual_at >= 0 && layout::is_op(g.nodes[residual_at], "add")) {
    const Node& add = g.nodes[residual_at];
    const int other = add.inputs.size() != 2 ? -1 : add.inputs[0] == viewed ? add.inputs[1] : add.inputs[0];
    const Value* o = other >= 0 ? &g.values[other] : nullptr;
    // Made before the matmul: a graph input, or a result of an earlier node.
    const bool ready = o && (std::count(g.inputs.begin(), g.inputs.end(), other) > 0 ||
                             (o->kind == ValueKind::Result && o->producer >= 0 && o->producer < m.node));
    if (ready && other != viewed && !is_constant(g, other) && o->meta.dtype == DType::Float32 &&
        o->meta.shape == g.values[viewed].meta.shape && g.values[add.outputs[0]].meta.shape == o->meta.shape &&
        numel_of(o->meta.shape) == m.call.m * m.call.n && row_major(g, other)) {
      f.epilogue.add_residual = true;
      f.residual = other;
      f.nodes.insert(f.nodes.end(), views.begin(), views.end());
      f.nodes.push_back(residual_at);
      f.y = add.outputs[0];
    }
  }
  const int relu_at = sole_reader(f.y);
  if (relu_at >= 0 && layout::is_op(g.nodes[relu_at], "relu")) {
    f.epilogue.relu = true;
    f.nodes.push_back(relu_at);
    f.y = g.nodes[relu_at].outputs[0];
  }
  const int q_at = sole_reader(f.y);
  if (q_at >= 0 && layout::is_op(g.nodes[q_at], "quantize_linear")) {
    const Node& q = g.nodes[q_at];
    const DType out = g.values[q.outputs[0]].meta.dtype;
    if (q.inputs.size() >= 3 && q.inputs[0] == f.y && is_constant(g, q.inputs[1]) && is_constant(g, q.inputs[2]) &&
        value_of(q.inputs[1]).numel() == 1 && value_of(q.inputs[2]).numel() == 1 &&
        (out == DType::UInt8 || out == DType::Int8)) {
      f.epilogue.requantize = true;
      f.epilogue.q_scale = cpu::onednn::scale_of(value_of(q.inputs[1]));
      f.epilogue.q_zero = cpu::onednn::zero_point_of(value_of(q.inputs[2]));
      f.epilogue.q_signed = out == DType::Int8;
      f.nodes.push_back(q_at);
      f.y = q.outputs[0];
    }
  }
  return f;
}

// A quantize_linear of a 4-d graph input by one scale and zero point.
bool quantizes_image_input(const Graph& g, const Node& n) {
  if (!layout::is_op(n, "quantize_linear") || n.inputs.size() < 3 || n.outputs.size() != 1) return false;
  const int x = n.inputs[0];
  return g.values[x].meta.shape.size() == 4 && std::count(g.inputs.begin(), g.inputs.end(), x) > 0 &&
         numel_of(g.values[n.inputs[1]].meta.shape) == 1 && n.inputs[2] >= 0 &&
         numel_of(g.values[n.inputs[2]].meta.shape) == 1;
}

// Which 4-d values may live channels-last: those whose every reader and
// writer is an int8 convolution or an elementwise op over their shape,
// grouped so that an elementwise op's operands share one layout.
class ChannelsLast {
 public:
  ChannelsLast(const Graph& g, const std::set<int>& convs) : g_(g), parent_(g.values.size()), plain_(g.values.size()),
                                                               touched_(g.values.size()) {
    std::iota(parent_.begin(), parent_.end(), 0);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.removed) continue;
      if (convs.count(static_cast<int>(i))) {
        touched_[n.inputs[0]] = touched_[n.outputs[0]] = true;
        continue;
      }
      // Pools run either way: input and output share one. A global pool's
      // output (one pixel) is the same memory in both, so whatever reads it
      // (a flatten) leaves the pool's input as it is.
      if (is_eight_bit_pool(g, n) || layout::is_op(n, "qlinear_avg_pool2d")) {
        if (!one_pixel(n.outputs[0])) unite(n.inputs[0], n.outputs[0]);
        continue;
      }
      if (is_channel_concat(g, n)) {  // its operands and output share one
        for (size_t i = 2; i < n.inputs.size(); i += 3) unite(n.inputs[i], n.outputs[0]);
        continue;
      }
      // The quantization of a graph input (plain) may write channels-last
      // (quantize_to_channels_last): the two need not share a layout.
      if (quantizes_image_input(g, n)) continue;
      if (!same_shape_elementwise(n)) {
        for (int v : n.inputs) force_plain(v);
        for (int v : n.outputs) force_plain(v);
      }
    }
    for (int v : g.inputs) force_plain(v);
    for (int v : g.outputs) force_plain(v);
    for (size_t v = 0; v < g.values.size(); ++v)
      if (g.values[v].kind != ValueKind::Result) force_plain(static_cast<int>(v));
    for (size_t v = 0; v < g.values.size(); ++v) {
      const int r = find(static_cast<int>(v));
      plain_[r] = plain_[r] || plain_[v];
      touched_[r] = touched_[r] || touched_[v];
    }
  }
  bool operator()(int v) {
    const int r = find(v);
    return g_.values[v].meta.shape.size() == 4 && touched_[r] && !plain_[r];
  }

 private:
  // An elementwise op whose operands all have its output's shape (or hold
  // one value): its 4-d operands and output join one group.
  bool same_shape_elementwise(const Node& n) {
    if (!n.op || !n.op->has_tag(kTagElementwise) || n.outputs.size() != 1 || n.op->writes_with(n.attrs)) return false;
    const Shape& out = g_.values[n.outputs[0]].meta.shape;
    if (out.size() != 4) return false;
    for (int v : n.inputs) {
      if (v < 0) continue;
      const Shape& s = g_.values[v].meta.shape;
      if (s != out && numel_of(s) != 1) return false;
    }
    for (int v : n.inputs)
      if (v >= 0 && g_.values[v].meta.shape == out) unite(v, n.outputs[0]);
    return true;
  }
  bool one_pixel(int v) const {
    const Shape& s = g_.values[v].meta.shape;
    return s.size() == 4 && s[2] == 1 && s[3] == 1;
  }
  void force_plain(int v) {
    if (v >= 0 && g_.values[v].meta.shape.size() == 4) plain_[v] = true;
  }
  int find(int v) { return parent_[v] == v ? v : parent_[v] = find(parent_[v]); }
  void unite(int a, int b) { parent_[find(a)] = find(b); }

  const Graph& g_;
  std::vector<int> parent_;
  std::vector<bool> plain_, touched_;
};

CustomKernel channels_last_pool(const cpu::PoolWindow& window, DType dtype) {
  return [window, dtype](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();  // NCHW by shape, NHWC in memory
    if (dtype == DType::UInt8)
      cpu::max_pool_values_nhwc(in[0].data<uint8_t>(), out[0].data<uint8_t>(), x[0], x[2], x[3], x[1], y[2], y[3], window);
    else
      cpu::max_pool_values_nhwc(in[0].data<int8_t>(), out[0].data<int8_t>(), x[0], x[2], x[3], x[1], y[2], y[3], window);
  };
}

CustomKernel channels_last_average_pool(const cpu::PoolWindow& window, bool count_include_pad) {
  return [window, count_include_pad](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();  // NCHW by shape, NHWC in memory
    const cpu::QuantizedPool p{window, x[0], x[1], x[2], x[3], y[2], y[3], count_include_pad,
                               cpu::onednn::zero_point_of(in[2]), cpu::onednn::zero_point_of(in[4]),
                               cpu::onednn::scale_of(in[1]) / cpu::onednn::scale_of(in[3])};
    if (in[0].dtype() == DType::UInt8) cpu::avg_pool_quantized_nhwc(p, in[0].data<uint8_t>(), out[0].data<uint8_t>());
    else cpu::avg_pool_quantized_nhwc(p, in[0].data<int8_t>(), out[0].data<int8_t>());
  };
}

// Channels-last concatenation of channels: each pixel's channels from every operand in turn.
template <typename T>
void concat_channels_last(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  const Shape& y = out[0].shape();
  const float ys = cpu::onednn::scale_of(in[0]);
  const int32_t yz = cpu::onednn::zero_point_of(in[1]);
  std::vector<cpu::Requantizer> requantizers;
  requantizers.reserve(in.size() / 3);
  std::vector<cpu::ConcatPart<T>> parts;
  for (size_t i = 2; i < in.size(); i += 3) {
    requantizers.emplace_back(cpu::onednn::scale_of(in[i + 1]), cpu::onednn::zero_point_of(in[i + 2]), ys, yz,
                              std::is_signed_v<T>);
    parts.push_back({in[i].data<T>(), in[i].shape()[1], &requantizers.back()});
  }
  cpu::concat_rows<T>(parts, y[0] * y[2] * y[3], out[0].data<T>());
}

CustomKernel int8_conv_kernel(const Int8Conv& c) {
  auto memo = std::make_shared<cpu::onednn::PrimitiveMemo>();
  return [c, memo](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const bool ran = cpu::onednn::quantized_conv_forward(
        c.call, in[0].raw_data(), c.x_zero, in[1].raw_data(), c.scales.data(),
        c.call.bias ? in[2].data<int32_t>() : nullptr, c.y_zero, out[0].raw_data(), memo.get());
    KILN_CHECK(ran, "the int8 convolution primitive chosen at compile time is gone");
  };
}

// qlinear op n becomes `kernel` over its input, its constant weights (input
// 3) reordered once by `prepare` into `bytes` of the primitive's `layout`
// (shared by every graph of those weights), and its bias.
void on_prepared_weights(Graph& g, Node& n, int64_t bytes, const std::string& layout,
                         const std::function<void(const int8_t*, void*)>& prepare, CustomKernel kernel,
                         std::string label) {
  const Tensor source = g.values[n.inputs[3]].tensor;
  const int prepared = add_derived_constant(g, n.inputs[3], layout, ".prepared", [&] {
    Tensor t = Tensor::empty({bytes}, DType::UInt8);
    prepare(source.contiguous().data<int8_t>(), t.raw_data());
    return t;
  });
  std::vector<int> inputs = {n.inputs[0], prepared};
  if (n.inputs.size() > 7 && n.inputs[7] >= 0) inputs.push_back(n.inputs[7]);
  n.inputs = inputs;
  n.custom = std::move(kernel);
  n.fused_from = n.op;
  n.op = nullptr;
  n.attrs = {};
  n.label = std::move(label);
}

// matmul_integer_to_float nodes whose b, b's scale and bias are constants,
// on Kiln's int8 tiles with b packed once; a's scale and zero point stay
// inputs (dynamic quantization computes them per run).
size_t integer_to_float_on_tiles(Graph& g) {
  size_t done = 0;
  for (Node& n : g.nodes) {
    if (n.removed || !n.op || n.op->name != "matmul_integer_to_float") continue;
    const bool bias = n.inputs.size() > 5 && n.inputs[5] >= 0;
    if (!is_constant(g, n.inputs[3]) || !is_constant(g, n.inputs[4]) || (bias && !is_constant(g, n.inputs[5])))
      continue;
    const Tensor b = g.values[n.inputs[3]].tensor;
    const int64_t k = b.shape()[0], cols = b.shape()[1];
    if (cols == 0 || !int8_tiles::take_matmul(k)) continue;
    const int prepared = add_derived_constant(g, n.inputs[3], int8_tiles::layout(k, cols), ".prepared", [&] {
      Tensor t = Tensor::empty({int8_tiles::packed_bytes(k, cols)}, DType::UInt8);
      int8_tiles::pack_matmul(b.contiguous().data<int8_t>(), k, cols, t.raw_data());
      return t;
    });
    n.custom = int8_tiles::integer_to_float_kernel(k, cols, g.values[n.inputs[0]].meta.dtype == DType::Int8,
                                                   g.values[n.inputs[4]].tensor, bias);
    std::vector<int> inputs = {n.inputs[0], n.inputs[1], n.inputs[2], prepared};
    if (bias) inputs.push_back(n.inputs[5]);
    n.inputs = inputs;
    n.fused_from = n.op;
    n.op = nullptr;
    n.attrs = {};
    n.label = "matmul_integer_to_float (int8, weights prepared)";
    ++done;
  }
  return done;
}

}  // namespace

std::string use_int8_layouts(Graph& g) {
  std::vector<Int8Conv> convs;
  std::vector<Int8Matmul> matmuls;
  std::set<int> at;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto c = int8_conv(g, static_cast<int>(i))) convs.push_back(*c), at.insert(c->node);
    if (auto m = int8_matmul(g, static_cast<int>(i))) matmuls.push_back(*m);
  }
  NoGradGuard no_grad;
  const size_t to_float = integer_to_float_on_tiles(g);
  const std::string to_float_note =
      std::to_string(to_float) + " dynamically quantized products (float results) weights packed once";
  if (convs.empty() && matmuls.empty()) return to_float ? "gave " + to_float_note : "";
  size_t dequantized = 0, on_tiles = 0;
  const std::vector<int> uses = g.use_counts();
  for (Int8Matmul& m : matmuls) {
    // The dequantization after it, and what follows that, in its epilogue
    // where oneDNN has a primitive for it.
    const DequantizeFold fold = dequantize_fold(g, m, uses);
    Int8Matmul folded = m;
    folded.call.dequantized = fold.epilogue;
    const bool fused =
        fold.epilogue.on && (m.tiles || cpu::onednn::quantized_matmul_weights_bytes(folded.call, m.scales.data()) != 0);
    if (fused) m = folded;
    Node& n = g.nodes[static_cast<size_t>(m.node)];
    const cpu::onednn::QuantizedMatmulCall& call = m.call;
    const float* scales = m.scales.data();
    std::string label = "qlinear_matmul (int8, weights prepared)";
    if (fused)
      label += std::string(" + dequantize") + (call.dequantized.add_vector ? " + add" : "") +
               (call.dequantized.add_residual ? " + residual" : "") + (call.dequantized.relu ? " + relu" : "") +
               (call.dequantized.requantize ? " + quantize" : "");
    if (m.tiles) {
      on_prepared_weights(
          g, n, int8_tiles::packed_bytes(call.k, call.n), int8_tiles::layout(call.k, call.n),
          [&](const int8_t* b, void* out) { int8_tiles::pack_matmul(b, call.k, call.n, out); },
          int8_tiles::matmul_kernel(call, m.scales, m.a_zero, m.y_zero), label);
      ++on_tiles;
    } else {
      on_prepared_weights(
          g, n, cpu::onednn::quantized_matmul_weights_bytes(call, scales),
          "onednn matmul " + cpu::onednn::quantized_matmul_weights_layout(call, scales),
          [&](const int8_t* b, void* out) { cpu::onednn::prepare_quantized_matmul_weights(call, scales, b, out); },
          int8_matmul_kernel(m), label);
    }
    if (!fused) continue;
    for (int at : fold.nodes) g.nodes[static_cast<size_t>(at)].removed = true;
    if (fold.vector >= 0) n.inputs.push_back(fold.vector);
    if (fold.residual >= 0) n.inputs.push_back(fold.residual);
    n.outputs[0] = fold.y;
    g.values[fold.y].producer = m.node;
    ++dequantized;
  }
  const std::string dequantized_note =
      dequantized ? ", " + std::to_string(dequantized) + " of them dequantized in their epilogue" : "";
  auto tiles_note = [&] {
    return on_tiles ? ", " + std::to_string(on_tiles) + " of the layers on Kiln's int8 tiles" : "";
  };
  const std::string also_to_float = to_float ? ", and " + to_float_note : "";
  if (convs.empty())
    return "gave " + std::to_string(matmuls.size()) + " int8 matrix products weights reordered once" +
           dequantized_note + tiles_note() + also_to_float;
  ChannelsLast channels_last(g, at);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (channels_last(static_cast<int>(v))) g.values[v].layout = "nhwc";
  size_t nhwc = 0;
  for (Int8Conv& c : convs) {
    Node& n = g.nodes[static_cast<size_t>(c.node)];
    c.call.x_nhwc = channels_last(n.inputs[0]);
    c.call.y_nhwc = channels_last(n.outputs[0]);
    nhwc += c.call.x_nhwc + c.call.y_nhwc;
    const cpu::onednn::QuantizedConvCall& call = c.call;
    const float* scales = c.scales.data();
    const std::string label =
        std::string("qlinear_conv2d (int8") + (call.x_nhwc || call.y_nhwc ? ", channels-last)" : ")");
    if (int8_tiles::take_conv(call)) {
      on_prepared_weights(
          g, n, int8_tiles::conv_packed_bytes(call), int8_tiles::conv_layout(call),
          [&](const int8_t* weights, void* out) { int8_tiles::pack_conv(call, weights, out); },
          int8_tiles::conv_kernel(call, c.scales, c.x_zero, c.y_zero), label);
      ++on_tiles;
      continue;
    }
    on_prepared_weights(
        g, n, cpu::onednn::quantized_weights_bytes(call, scales),
        "onednn " + cpu::onednn::quantized_weights_layout(call, scales),
        [&](const int8_t* w, void* out) { cpu::onednn::prepare_quantized_weights(call, scales, w, out); },
        int8_conv_kernel(c), label);
  }
  size_t pools = 0;
  for (Node& n : g.nodes) {
    if (!is_eight_bit_pool(g, n) || !channels_last(n.inputs[0])) continue;
    n.custom = channels_last_pool(cpu::PoolWindow::of(Pool2dAttrs::of(n.attrs)), g.values[n.inputs[0]].meta.dtype);
    n.label = "max_pool2d (values, channels-last)";
    ++pools;
  }
  for (Node& n : g.nodes) {
    if (n.removed || !quantizes_image_input(g, n) || !channels_last(n.outputs[0])) continue;
    n.custom = [](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      cpu::quantize_to_channels_last(in[0], cpu::onednn::scale_of(in[1]), cpu::onednn::zero_point_of(in[2]), out[0]);
    };
    n.fused_from = n.op;
    n.op = nullptr;
    n.attrs = {};
    n.label = "quantize_linear (to channels-last)";
  }
  size_t others = 0;  // average pools and concatenations
  for (Node& n : g.nodes) {
    if (layout::is_op(n, "qlinear_avg_pool2d") && channels_last(n.inputs[0])) {
      n.custom = channels_last_average_pool(cpu::PoolWindow::of(Pool2dAttrs::of(n.attrs)),
                                            n.attrs.get_bool("count_include_pad", true));
      n.label = "qlinear_avg_pool2d (channels-last)";
    } else if (is_channel_concat(g, n) && channels_last(n.outputs[0])) {
      n.custom = g.values[n.outputs[0]].meta.dtype == DType::UInt8 ? CustomKernel(concat_channels_last<uint8_t>)
                                                                    : CustomKernel(concat_channels_last<int8_t>);
      n.label = "qlinear_concat (channels-last)";
    } else {
      continue;
    }
    n.fused_from = n.op;
    n.op = nullptr;
    n.attrs = {};
    ++others;
  }
  return "gave " + std::to_string(convs.size()) + " int8 convolutions and " + std::to_string(matmuls.size()) +
         " matrix products weights reordered once" + dequantized_note + ", " + std::to_string(nhwc) +
         " of the convolutions' activations "
         "channels-last" +
         (pools ? ", " + std::to_string(pools) + " max pools channels-last" : "") +
         (others ? ", " + std::to_string(others) + " average pools and concatenations channels-last" : "") +
         tiles_note() + also_to_float;
}

}  // namespace kiln::graph

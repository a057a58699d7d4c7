#include "runtime/onnx_qdq_fusion.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "io/onnx_tensor.h"
#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

using ::onnx::NodeProto;
using ::onnx::TensorProto;

// A node's attributes, with ONNX's defaults.
OnnxNode attrs(const NodeProto& n) { return OnnxNode(n, 0); }
bool is(const NodeProto& n, const char* type) {
  return n.op_type() == type && (n.domain().empty() || n.domain() == "ai.onnx");
}
std::string input(const NodeProto& n, int i) { return i < n.input_size() ? n.input(i) : std::string(); }

// The nodes the patterns name, with the inputs and the one output they read
// (a malformed model is left to the converters, which say what is wrong).
bool well_formed(const NodeProto& n) {
  if (n.output_size() != 1) return false;
  if (is(n, "QuantizeLinear")) return n.input_size() >= 3;
  if (is(n, "DequantizeLinear") || is(n, "Conv") || is(n, "MatMul") || is(n, "Gemm") || is(n, "Add"))
    return n.input_size() >= 2;
  if (is(n, "Relu") || is(n, "Clip") || is(n, "Flatten") || is(n, "AveragePool") || is(n, "GlobalAveragePool") ||
      is(n, "Concat"))
    return n.input_size() >= 1;
  return true;
}

class Fuser {
 public:
  explicit Fuser(::onnx::GraphProto& g) : g_(g) {
    for (const auto& t : g.initializer()) init_[t.name()] = &t;
    for (int i = 0; i < g.node_size(); ++i)
      for (const auto& o : g.node(i).output()) producer_[o] = i;
    count_uses();
    removed_.assign(static_cast<size_t>(g.node_size()), false);
  }

  QdqFusion run() {
    QdqFusion done;
    for (int i = 0; i < g_.node_size(); ++i) {
      if (!is(g_.node(i), "QuantizeLinear") || !well_formed(g_.node(i))) continue;
      std::optional<NodeProto> fused = fuse_at(i, done);
      if (fused) *g_.mutable_node(i) = std::move(*fused);
    }
    for (int i = 0; i < g_.node_size(); ++i)
      if (!removed_[static_cast<size_t>(i)] && is(g_.node(i), "MatMulInteger")) fuse_dynamic(i, done);
    if (done.total() == 0) return done;
    drop_removed();
    drop_dead_dequantizers();
    return done;
  }

 private:
  struct Quantized {  // a DequantizeLinear'd value: the quantized tensor and its parameters
    std::string q, scale, zero;
  };

  // Uses of each value: node inputs here and in subgraphs (read by name), and graph outputs.
  void count_uses() {
    uses_.clear();
    std::function<void(const ::onnx::GraphProto&)> visit = [&](const ::onnx::GraphProto& g) {
      for (const auto& n : g.node()) {
        for (const auto& in : n.input()) ++uses_[in];
        for (const auto& a : n.attribute()) {
          if (a.has_g()) visit(a.g());
          for (const auto& sub : a.graphs()) visit(sub);
        }
      }
      for (const auto& o : g.output()) ++uses_[o.name()];
    };
    visit(g_);
  }

  const NodeProto* producer(const std::string& value) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || removed_[static_cast<size_t>(it->second)]) return nullptr;
    const NodeProto& n = g_.node(it->second);
    return well_formed(n) ? &n : nullptr;
  }
  // An initializer, or the tensor of a Constant node (as torch.onnx.export
  // writes a clip's bounds), also behind Identity nodes.
  std::optional<Tensor> constant(const std::string& name) const {
    if (auto it = init_.find(name); it != init_.end())
      return onnx_io::from_proto(*it->second, "initializer '" + name + "'");
    const NodeProto* p = producer(name);
    // (torch.onnx.export shares equal weights and biases through Identity nodes)
    if (p && is(*p, "Identity") && p->input_size() == 1) return constant(p->input(0));
    if (!p || !is(*p, "Constant") || p->attribute_size() != 1 || !p->attribute(0).has_t()) return std::nullopt;
    return onnx_io::from_proto(p->attribute(0).t(), "constant '" + name + "'");
  }
  bool used_once(const std::string& value) const {
    auto it = uses_.find(value);
    return it != uses_.end() && it->second == 1;
  }

  // The quantized operand behind `value`: a DequantizeLinear of a uint8 or
  // int8 tensor with one scale and zero point, both initializers.
  std::optional<Quantized> activation(const std::string& value) {
    const NodeProto* dq = producer(value);
    if (!dq || !is(*dq, "DequantizeLinear") || attrs(*dq).i("block_size", 0) != 0) return std::nullopt;
    const auto scale = constant(input(*dq, 1));
    if (!scale || scale->numel() != 1 || scale->dtype() != DType::Float32) return std::nullopt;
    // Without a zero point the quantized type is not known here: left as it is.
    Quantized r{dq->input(0), dq->input(1), input(*dq, 2)};
    const auto zero = constant(r.zero);
    if (!zero || zero->numel() != 1 || (zero->dtype() != DType::UInt8 && zero->dtype() != DType::Int8)) return std::nullopt;
    return r;
  }

  // Symmetric int8 weights behind `value`: an int8 initializer dequantized
  // with zero points 0 and one scale, or one per index of `axis`.
  std::optional<Quantized> weights(const std::string& value, int64_t axis, Tensor& scale_out) {
    const NodeProto* dq = producer(value);
    if (!dq || !is(*dq, "DequantizeLinear") || attrs(*dq).i("block_size", 0) != 0) return std::nullopt;
    const auto w = constant(dq->input(0));
    const auto scale = constant(input(*dq, 1));
    if (!w || w->dtype() != DType::Int8 || !scale || scale->dtype() != DType::Float32) return std::nullopt;
    if (!input(*dq, 2).empty()) {
      const auto zero = constant(input(*dq, 2));
      if (!zero || zero->dtype() != DType::Int8 || !all_zero(*zero)) return std::nullopt;
    }
    if (scale->numel() != 1) {
      int64_t a = attrs(*dq).i("axis", 1);
      if (a < 0) a += w->dim();
      if (a != axis || scale->dim() != 1 || scale->numel() != w->shape()[static_cast<size_t>(axis)]) return std::nullopt;
    }
    scale_out = scale->reshape({scale->numel()});
    return Quantized{dq->input(0), dq->input(1), ""};
  }

  // Ops that only move elements, as quantizers put QDQ pairs around them.
  static bool moves_data(const NodeProto& n) {
    return is(n, "Reshape") || is(n, "Flatten") || is(n, "Transpose") || is(n, "Squeeze") || is(n, "Unsqueeze");
  }

  static bool equal_values(const Tensor& a, const Tensor& b) {
    return cast(a, DType::Float64).item<double>() == cast(b, DType::Float64).item<double>();
  }
  static bool all_zero(const Tensor& t) {
    for (int8_t v : t.contiguous().to_vector<int8_t>())
      if (v != 0) return false;
    return true;
  }

  // An int32 bias in the accumulator's scale (x_scale * w_scale per output
  // channel): a DequantizeLinear'd int32 initializer whose scale is that
  // already is used as it is; one of another scale, or float32, is
  // requantized into it. "" when there is none; nullopt when it cannot be had.
  std::optional<std::string> bias(const std::string& value, float x_scale, const Tensor& w_scale, int64_t channels) {
    if (value.empty()) return std::string();
    std::vector<double> acc_scale(static_cast<size_t>(channels));
    const auto ws = w_scale.to_vector<float>();
    for (int64_t o = 0; o < channels; ++o) acc_scale[o] = static_cast<double>(x_scale * ws[ws.size() == 1 ? 0 : o]);
    std::vector<double> real;
    if (const NodeProto* dq = producer(value); dq && is(*dq, "DequantizeLinear")) {
      const auto b = constant(dq->input(0)), s = constant(input(*dq, 1));
      if (!b || b->dtype() != DType::Int32 || b->numel() != channels || !s || s->dtype() != DType::Float32) return std::nullopt;
      const auto sv = s->to_vector<float>();
      if (sv.size() != 1 && static_cast<int64_t>(sv.size()) != channels) return std::nullopt;
      std::vector<double> zero(static_cast<size_t>(channels), 0.0);
      if (!input(*dq, 2).empty()) {
        const auto z = constant(input(*dq, 2));
        if (!z || (z->numel() != 1 && z->numel() != channels)) return std::nullopt;
        const auto zv = cast(*z, DType::Float64).contiguous().to_vector<double>();
        for (int64_t o = 0; o < channels; ++o) zero[o] = zv[zv.size() == 1 ? 0 : o];
      }
      const auto bv = b->contiguous().to_vector<int32_t>();
      bool same_scale = true;
      for (int64_t o = 0; o < channels; ++o) {
        const double s_o = sv[sv.size() == 1 ? 0 : o];
        same_scale = same_scale && zero[o] == 0 && std::fabs(s_o - acc_scale[o]) <= 1e-6 * acc_scale[o];
        real.push_back((bv[o] - zero[o]) * s_o);
      }
      if (same_scale) return dq->input(0);
    } else if (auto b = constant(value); b && b->dtype() == DType::Float32 && b->numel() == channels) {
      real = cast(*b, DType::Float64).contiguous().to_vector<double>();
    } else {
      return std::nullopt;
    }
    std::vector<int32_t> q(static_cast<size_t>(channels));
    for (int64_t o = 0; o < channels; ++o) {
      const double v = std::nearbyint(real[o] / acc_scale[o]);
      if (!(std::fabs(v) < 2147483647.0)) return std::nullopt;
      q[o] = static_cast<int32_t>(v);
    }
    return add_initializer(value + "_int32", from_vector<int32_t>(q, {channels}));
  }

  // The bounds a Relu or Clip keeps values within (constant ones; a Clip
  // whose bounds are computed keeps none that this can rely on).
  std::pair<double, double> clip_bounds(const NodeProto& n) const {
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (is(n, "Relu")) return {0.0, inf};
    if (n.input_size() == 1 && (attrs(n).has("min") || attrs(n).has("max")))  // before opset 11
      return {attrs(n).f("min", -inf), attrs(n).f("max", inf)};
    double lo = -inf, hi = inf;
    for (int i : {1, 2}) {
      if (input(n, i).empty()) continue;
      const auto bound = constant(input(n, i));
      if (!bound || bound->numel() != 1) return {inf, -inf};  // nothing satisfies these
      (i == 1 ? lo : hi) = cast(*bound, DType::Float64).item<double>();
    }
    return {lo, hi};
  }

  std::string add_initializer(const std::string& base, const Tensor& t) {
    std::string name = base;
    for (int i = 1; init_.count(name) || producer_.count(name); ++i) name = base + "_" + std::to_string(i);
    TensorProto* p = g_.add_initializer();
    onnx_io::to_proto(t, *p);
    p->set_name(name);
    init_[name] = p;
    return name;
  }

  // The fused node that replaces QuantizeLinear node `at`, or nullopt.
  std::optional<NodeProto> fuse_at(int at, QdqFusion& done) {
    const NodeProto& q = g_.node(at);
    if (attrs(q).has("output_dtype") || attrs(q).i("block_size", 0) != 0) return std::nullopt;
    const auto y_scale = constant(q.input(1)), y_zero = constant(q.input(2));
    if (!y_scale || y_scale->numel() != 1 || y_scale->dtype() != DType::Float32 || !y_zero || y_zero->numel() != 1 ||
        (y_zero->dtype() != DType::UInt8 && y_zero->dtype() != DType::Int8))
      return std::nullopt;
    std::string y = q.input(0);
    if (!used_once(y)) return std::nullopt;
    const NodeProto* op = producer(y);
    const NodeProto* relu = nullptr;
    if (op && (is(*op, "Relu") || is(*op, "Clip"))) {
      // Saturation does what a ReLU or a clip does when the values the output
      // holds lie within the clip's bounds (zero the lowest, for a ReLU).
      const double lowest = y_zero->dtype() == DType::UInt8 ? 0.0 : -128.0;
      const double zero = cast(*y_zero, DType::Float64).item<double>(), scale = y_scale->item<float>();
      const auto [lo, hi] = clip_bounds(*op);
      // Within float32's rounding of the scale: a range calibrated to end at the bound ends there.
      auto slack = [](double bound) { return std::isfinite(bound) ? 1e-6 * std::max(1.0, std::fabs(bound)) : 0.0; };
      if ((lowest - zero) * scale < lo - slack(lo) || (lowest + 255 - zero) * scale > hi + slack(hi) ||
          !used_once(op->input(0)))
        return std::nullopt;
      relu = op;
      op = producer(op->input(0));
    }
    if (!op) return std::nullopt;
    if (is(*op, "Concat") && !relu) return fuse_concat(*op, q, done);
    if (is(*op, "Flatten") && !relu && used_once(op->input(0))) {
      const NodeProto* pool = producer(op->input(0));
      if (pool && (is(*pool, "AveragePool") || is(*pool, "GlobalAveragePool"))) return fuse_average_pool(*pool, op, q, done);
    }
    if ((is(*op, "AveragePool") || is(*op, "GlobalAveragePool")) && !relu) return fuse_average_pool(*op, nullptr, q, done);
    const auto x = activation(input(*op, 0));
    if (!x) return std::nullopt;
    const bool pool = is(*op, "MaxPool");
    if ((pool || moves_data(*op)) && !relu) {
      // The maximum and data movement commute with dequantizing: with the same
      // scale and zero point on both sides, they run on the quantized values.
      const auto x_zero = constant(x->zero);
      if (op->output_size() != 1 || constant(x->scale)->item<float>() != y_scale->item<float>() ||
          x_zero->dtype() != y_zero->dtype() || !equal_values(*x_zero, *y_zero))
        return std::nullopt;
      NodeProto fused = *op;
      fused.set_input(0, x->q);
      fused.set_output(0, q.output(0));
      removed_[static_cast<size_t>(producer_.at(op->output(0)))] = true;
      ++(pool ? done.pool : done.moved);
      return fused;
    }
    if (is(*op, "Add")) {
      const auto b = activation(input(*op, 1));
      if (!b) return std::nullopt;
      NodeProto fused;
      fused.set_op_type("QLinearAdd");
      fused.set_domain("com.microsoft");
      for (const std::string& in : {x->q, x->scale, x->zero, b->q, b->scale, b->zero, q.input(1), q.input(2)})
        fused.add_input(in);
      fused.set_name(op->name().empty() ? q.name() : op->name());
      fused.add_output(q.output(0));
      removed_[static_cast<size_t>(producer_.at(op->output(0)))] = true;
      if (relu) removed_[static_cast<size_t>(producer_.at(relu->output(0)))] = true;
      ++done.add;
      return fused;
    }
    const float x_scale = constant(x->scale)->item<float>();
    NodeProto fused;
    Tensor w_scale;
    if (is(*op, "Conv")) {
      const auto w = weights(input(*op, 1), 0, w_scale);
      if (!w) return std::nullopt;
      const int64_t channels = constant(w->q)->shape()[0];
      const auto b = bias(input(*op, 2), x_scale, w_scale, channels);
      if (!b) return std::nullopt;
      fused.set_op_type("QLinearConv");
      for (const std::string& in : {x->q, x->scale, x->zero, w->q, w->scale, std::string(), q.input(1), q.input(2)})
        fused.add_input(in);
      fused.set_input(5, add_initializer(w->q + "_zero", zeros(w_scale.numel() == 1 ? Shape{} : Shape{channels}, DType::Int8)));
      if (!b->empty()) fused.add_input(*b);
      for (const auto& a : op->attribute()) *fused.add_attribute() = a;
      ++done.conv;
    } else if (is(*op, "MatMul")) {
      const auto w = weights(input(*op, 1), 1, w_scale);
      if (w && constant(w->q)->dim() == 2) {
        fused.set_op_type("QLinearMatMul");
        for (const std::string& in : {x->q, x->scale, x->zero, w->q, w->scale, std::string(), q.input(1), q.input(2)})
          fused.add_input(in);
        fused.set_input(5, add_initializer(w->q + "_zero", zeros({}, DType::Int8)));
      } else if (const auto b = activation(input(*op, 1))) {
        // Two computed operands (attention's products).
        fused.set_op_type("QLinearMatMul");
        for (const std::string& in : {x->q, x->scale, x->zero, b->q, b->scale, b->zero, q.input(1), q.input(2)})
          fused.add_input(in);
      } else {
        return std::nullopt;
      }
      ++done.matmul;
    } else if (is(*op, "Gemm")) {
      const bool trans_b = attrs(*op).i("transB", 0) != 0;
      if (attrs(*op).i("transA", 0) != 0 || attrs(*op).f("alpha", 1.0) != 1.0 || attrs(*op).f("beta", 1.0) != 1.0)
        return std::nullopt;
      const auto w = weights(input(*op, 1), trans_b ? 0 : 1, w_scale);
      if (!w || constant(w->q)->dim() != 2) return std::nullopt;
      const int64_t channels = constant(w->q)->shape()[trans_b ? 0 : 1];
      const auto b = bias(input(*op, 2), x_scale, w_scale, channels);
      if (!b) return std::nullopt;
      fused.set_op_type("QGemm");
      fused.set_domain("com.microsoft");
      for (const std::string& in : {x->q, x->scale, x->zero, w->q, w->scale, std::string(), *b, q.input(1), q.input(2)})
        fused.add_input(in);
      fused.set_input(5, add_initializer(w->q + "_zero", zeros({}, DType::Int8)));
      auto* a = fused.add_attribute();
      a->set_name("transB");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(trans_b ? 1 : 0);
      ++done.gemm;
    } else {
      return std::nullopt;
    }
    fused.set_name(op->name().empty() ? q.name() : op->name());
    fused.add_output(q.output(0));
    removed_[static_cast<size_t>(producer_.at(op->output(0)))] = true;
    if (relu) removed_[static_cast<size_t>(producer_.at(relu->output(0)))] = true;
    return fused;
  }

  // Concat of DequantizeLinear'd operands -> QuantizeLinear `q`: QLinearConcat.
  std::optional<NodeProto> fuse_concat(const NodeProto& op, const NodeProto& q, QdqFusion& done) {
    NodeProto fused;
    fused.set_op_type("QLinearConcat");
    fused.set_domain("com.microsoft");
    fused.add_input(q.input(1));
    fused.add_input(q.input(2));
    const auto y_zero = constant(q.input(2));
    for (const std::string& value : op.input()) {
      const auto x = activation(value);
      if (!x || constant(x->zero)->dtype() != y_zero->dtype()) return std::nullopt;
      for (const std::string& in : {x->q, x->scale, x->zero}) fused.add_input(in);
    }
    for (const auto& a : op.attribute()) *fused.add_attribute() = a;
    fused.set_name(op.name().empty() ? q.name() : op.name());
    fused.add_output(q.output(0));
    removed_[static_cast<size_t>(producer_.at(op.output(0)))] = true;
    ++done.concat;
    return fused;
  }

  // Whether an AveragePool's window is one the integer kernel takes: 2-d,
  // explicit symmetric padding below the window, no ceil_mode or dilations.
  static bool plain_window(const NodeProto& n) {
    const OnnxNode a = attrs(n);
    if (a.s("auto_pad", "NOTSET") != "NOTSET" || a.i("ceil_mode", 0) != 0) return false;
    const auto kernel = a.ints("kernel_shape", {}), pads = a.ints("pads", {0, 0, 0, 0});
    if (kernel.size() != 2 || pads.size() != 4) return false;
    for (int64_t d : a.ints("dilations", {1, 1}))
      if (d != 1) return false;
    for (size_t i = 0; i < 2; ++i)
      if (pads[i] != pads[i + 2] || pads[i] < 0 || pads[i] >= kernel[i]) return false;
    return true;
  }

  // AveragePool or GlobalAveragePool `pool` of a DequantizeLinear'd value ->
  // (Flatten `flatten`) -> QuantizeLinear `q`: the QLinear pool, and the
  // Flatten of its quantized output where the QuantizeLinear was.
  std::optional<NodeProto> fuse_average_pool(const NodeProto& pool, const NodeProto* flatten, const NodeProto& q,
                                             QdqFusion& done) {
    const auto x = activation(input(pool, 0));
    if (!x || pool.output_size() != 1 || (is(pool, "AveragePool") && !plain_window(pool))) return std::nullopt;
    if (constant(x->zero)->dtype() != constant(q.input(2))->dtype()) return std::nullopt;
    NodeProto fused;
    fused.set_op_type(is(pool, "AveragePool") ? "QLinearAveragePool" : "QLinearGlobalAveragePool");
    fused.set_domain("com.microsoft");
    for (const std::string& in : {x->q, x->scale, x->zero, q.input(1), q.input(2)}) fused.add_input(in);
    for (const auto& a : pool.attribute()) *fused.add_attribute() = a;
    fused.set_name(pool.name().empty() ? q.name() : pool.name());
    ++done.average_pool;
    const int at = producer_.at(pool.output(0));
    if (!flatten) {
      fused.add_output(q.output(0));
      removed_[static_cast<size_t>(at)] = true;
      return fused;
    }
    std::string quantized = pool.output(0) + "_quantized";
    for (int i = 1; producer_.count(quantized) || init_.count(quantized); ++i)
      quantized = pool.output(0) + "_quantized_" + std::to_string(i);
    NodeProto flat = *flatten;
    flat.set_input(0, quantized);
    flat.set_output(0, q.output(0));
    removed_[static_cast<size_t>(producer_.at(flatten->output(0)))] = true;
    fused.add_output(quantized);
    producer_[quantized] = at;
    *g_.mutable_node(at) = std::move(fused);  // the pool's node, earlier than the QuantizeLinear's
    return flat;
  }

  // The one live node that reads `value`, where exactly one does.
  int sole_reader(const std::string& value) const {
    if (!used_once(value)) return -1;
    for (int i = 0; i < g_.node_size(); ++i) {
      if (removed_[static_cast<size_t>(i)]) continue;
      for (const auto& in : g_.node(i).input())
        if (in == value) return i;
    }
    return -1;  // (a graph output)
  }

  // quantize_dynamic's MatMul: MatMulInteger of a DynamicQuantizeLinear'd a
  // and symmetric int8 weights, Cast to float, times the product of a's
  // scale and the weights' (then plus a bias vector, where one follows)
  // becomes com.microsoft's MatMulIntegerToFloat, in the last node's place.
  void fuse_dynamic(int at, QdqFusion& done) {
    const NodeProto& mm = g_.node(at);
    if (mm.input_size() < 2 || mm.output_size() != 1) return;
    const auto made_by = producer_.find(mm.input(0));  // (three outputs: not well_formed's kind)
    if (made_by == producer_.end() || removed_[static_cast<size_t>(made_by->second)]) return;
    const NodeProto* dql = &g_.node(made_by->second);
    if (!dql || !is(*dql, "DynamicQuantizeLinear") || dql->output_size() != 3 || dql->output(0) != mm.input(0)) return;
    if (!input(mm, 2).empty() && input(mm, 2) != dql->output(2)) return;
    const auto w = constant(mm.input(1));
    if (!w || w->dtype() != DType::Int8 || w->dim() != 2) return;
    if (!input(mm, 3).empty()) {
      const auto zero = constant(input(mm, 3));
      if (!zero || zero->dtype() != DType::Int8 || !all_zero(*zero)) return;
    }
    const int cast_at = sole_reader(mm.output(0));
    if (cast_at < 0 || !is(g_.node(cast_at), "Cast") || attrs(g_.node(cast_at)).i("to", 0) != TensorProto::FLOAT)
      return;
    const std::string& as_float = g_.node(cast_at).output(0);
    const int mul_at = sole_reader(as_float);
    if (mul_at < 0 || !is(g_.node(mul_at), "Mul") || g_.node(mul_at).input_size() != 2) return;
    const NodeProto& mul = g_.node(mul_at);
    const std::string& scales = mul.input(0) == as_float ? mul.input(1) : mul.input(0);
    const NodeProto* product = producer(scales);  // a's scale times the weights'
    if (!product || !is(*product, "Mul") || product->input_size() != 2) return;
    const bool a_first = product->input(0) == dql->output(1);
    if (!a_first && product->input(1) != dql->output(1)) return;
    const std::string& w_scale = product->input(a_first ? 1 : 0);
    const auto ws = constant(w_scale);
    const int64_t cols = w->shape()[1];
    if (!ws || ws->dtype() != DType::Float32 || (ws->numel() != 1 && ws->numel() != cols)) return;
    std::string bias, output = mul.output(0);
    int last = mul_at;
    if (const int add_at = sole_reader(mul.output(0)); add_at >= 0 && is(g_.node(add_at), "Add")) {
      const NodeProto& add = g_.node(add_at);
      const std::string& other = add.input(0) == mul.output(0) ? add.input(1) : add.input(0);
      const auto b = constant(other);
      if (b && b->dtype() == DType::Float32 && b->numel() == cols && b->shape().back() == cols) {
        bias = other, output = add.output(0), last = add_at;
        removed_[static_cast<size_t>(mul_at)] = true;
      }
    }
    NodeProto fused;
    fused.set_op_type("MatMulIntegerToFloat");
    fused.set_domain("com.microsoft");
    fused.set_name(mm.name().empty() ? output : mm.name());
    for (const std::string& in : {mm.input(0), mm.input(1), dql->output(1), w_scale, input(mm, 2), input(mm, 3), bias})
      fused.add_input(in);
    fused.add_output(output);
    removed_[static_cast<size_t>(at)] = true;
    removed_[static_cast<size_t>(cast_at)] = true;
    *g_.mutable_node(last) = std::move(fused);
    ++done.dynamic;
  }

  void drop_removed() {
    ::onnx::GraphProto kept;
    for (int i = 0; i < g_.node_size(); ++i)
      if (!removed_[static_cast<size_t>(i)]) *kept.add_node() = std::move(*g_.mutable_node(i));
    g_.mutable_node()->Swap(kept.mutable_node());
  }

  // DequantizeLinear nodes nothing reads any more (those of fused weights).
  void drop_dead_dequantizers() {
    count_uses();
    ::onnx::GraphProto kept;
    for (auto& n : *g_.mutable_node())
      if (!is(n, "DequantizeLinear") || n.output_size() != 1 || uses_[n.output(0)] > 0) *kept.add_node() = std::move(n);
    g_.mutable_node()->Swap(kept.mutable_node());
  }

  ::onnx::GraphProto& g_;
  std::map<std::string, const TensorProto*> init_;
  std::map<std::string, int> producer_;
  std::map<std::string, int> uses_;
  std::vector<bool> removed_;
};

}  // namespace

std::string QdqFusion::summary() const {
  std::string s;
  auto part = [&](int n, const char* what) {
    if (n) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  part(conv, "Conv");
  part(matmul, "MatMul");
  part(gemm, "Gemm");
  part(add, "Add");
  part(pool, "MaxPool");
  part(concat, "Concat");
  part(average_pool, "average pool");
  part(moved, "Reshape/Flatten/Transpose");
  part(dynamic, "dynamically quantized MatMul");
  return s.empty() ? s : s + " on int8 kernels";
}

QdqFusion fuse_qdq(::onnx::GraphProto& graph) { return Fuser(graph).run(); }

}  // namespace kiln::runtime

// Fusions into vendor calls: convolution + ReLU, and linear + bias
// (+ residual add) (+ ReLU) (oneDNN post-ops), the bias
// gradient computed by the convolution's weight-gradient primitive, the ReLU
// gradient folded into the max-pool gradient, and linear layers that read the
// same input (attention's Q, K and V projections) merged into one GEMM.
#include <algorithm>
#include <map>

#include "backends/cpu/onednn_linear.h"
#include "backends/cpu/packed_linear.h"
#include "graph/derived_constants.h"
#include "graph/passes.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {

bool is_op(const Node& n, const char* name) { return !n.removed && n.op && n.op->name == name; }

// in: x, w, [bias], [residual] -> y = x w^T + bias (+ residual), ReLU'd when
// relu: one oneDNN matmul with post-ops, or, where oneDNN refuses the shape,
// the registry's GEMM (`gemm`) and a pass over the output.
CustomKernel fused_linear_kernel(KernelFn gemm, bool residual, bool relu) {
  return [gemm, residual, relu](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const size_t operands = in.size() - (residual ? 1 : 0);
    const bool bias = operands > 2 && in[2].defined();
    const Tensor x = in[0].contiguous(), w = in[1].contiguous(), b = bias ? in[2].contiguous() : Tensor();
    float* y = out[0].data<float>();
    const int64_t features = w.shape()[1], n = out[0].numel();
    Tensor r = residual ? in.back().contiguous() : Tensor();
    if (residual && r.data<float>() != y) std::copy_n(r.data<float>(), n, y);
    cpu::onednn::LinearCall call{features ? x.numel() / features : 0, features, w.shape()[0], bias, residual, relu};
    if (features > 0 && call.rows > 0 &&
        cpu::onednn::linear_forward(call, x.data<float>(), w.data<float>(), bias ? b.data<float>() : nullptr, y))
      return;
    if (residual) r = r.clone();  // y may be the residual's own buffer, which the GEMM overwrites
    gemm(std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(operands)), out, Attrs{});
    const float* pr = residual ? r.data<float>() : nullptr;
    parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float v = pr ? y[i] + pr[i] : y[i];
        y[i] = relu && v < 0.0f ? 0.0f : v;
      }
    });
  };
}

}  // namespace

std::string matmul_bias_to_linear(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  const OpDef& linear = OpRegistry::instance().get("linear");
  size_t rewritten = 0;
  for (Node& add : g.nodes) {
    if (!is_op(add, "add") || add.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const int y = add.inputs[side], b = add.inputs[1 - side];
      if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
      const int at = g.values[y].producer;
      Node& mm = g.nodes[at];
      if (!is_op(mm, "matmul")) continue;
      const Value &w = g.values[mm.inputs[1]], &bias = g.values[b];
      if (w.kind != ValueKind::Constant || bias.kind != ValueKind::Constant || w.meta.dtype != DType::Float32 ||
          bias.meta.dtype != DType::Float32 || w.meta.shape.size() != 2 || g.values[mm.inputs[0]].meta.shape.size() < 2)
        continue;
      const int64_t n = w.meta.shape[1];
      // The bias must be one value per output feature, broadcast over the rest.
      const Shape& bs = bias.meta.shape;
      bool per_feature = !bs.empty() && bs.back() == n && numel_of(bs) == n;
      if (!per_feature || g.values[add.outputs[0]].meta.shape != g.values[y].meta.shape) continue;
      NoGradGuard no_grad;
      const Tensor weight = w.tensor, flat_bias = bias.tensor.reshape({n}).contiguous();
      const std::string bias_name = bias.name;
      const int x = mm.inputs[0], out = add.outputs[0];
      Node k;
      k.op = &linear;
      k.inputs = {x, add_derived_constant(g, mm.inputs[1], "transposed", ".t",
                                          [&] { return weight.transpose(0, 1).contiguous(); }),
                  add_constant(g, flat_bias, bias_name)};
      k.outputs = {out};
      g.nodes[at] = std::move(k);
      g.values[out].producer = at;
      g.values[out].output_index = 0;
      add.removed = true;
      ++rewritten;
      break;
    }
  }
  return rewritten ? "turned " + std::to_string(rewritten) + " matmul + bias pairs with constant weights into linear ops" : "";
}

// A view, or a permute that moves only axes of size 1 (a sequence-first
// [L, 1, D] read as [1, L, D]), keeps its input's elements in their order.
bool keeps_element_order(const Graph& g, const Node& n) {
  if (is_op(n, "view")) return true;
  if (!is_op(n, "permute")) return false;
  const Shape& in = g.values[n.inputs[0]].meta.shape;
  int64_t last = -1;
  for (int64_t axis : n.attrs.get_ints("order", {})) {
    if (in[axis] == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

std::string fuse_linear_residual(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  size_t fused = 0, relus = 0;
  for (Node& add : g.nodes) {
    if (!is_op(add, "add") || add.inputs.size() != 2) continue;
    const int sum = add.outputs[0];
    if (g.values[sum].meta.dtype != DType::Float32) continue;
    for (int side = 0; side < 2; ++side) {
      const int r = add.inputs[1 - side];
      if (add.inputs[side] == r) continue;
      // Back to the linear layer through views that keep its elements' order
      // (a transformer's attention output goes [L, D] -> [L, 1, D] -> [1, L, D]).
      int y = add.inputs[side];
      std::vector<Node*> views;
      while (g.values[y].kind == ValueKind::Result && uses[y] == 1 && !mutated[y] &&
             keeps_element_order(g, g.nodes[g.values[y].producer])) {
        views.push_back(&g.nodes[g.values[y].producer]);
        y = views.back()->inputs[0];
      }
      if (y == r || g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
      const int at = g.values[y].producer;
      Node& linear = g.nodes[at];
      if (!is_op(linear, "linear") || g.values[r].meta.shape != g.values[sum].meta.shape ||
          g.values[add.inputs[side]].meta.shape != g.values[sum].meta.shape ||
          numel_of(g.values[y].meta.shape) != numel_of(g.values[sum].meta.shape))
        continue;
      // The residual is copied into the output before the GEMM: it must exist by then.
      if (g.values[r].kind == ValueKind::Result && g.values[r].producer > at) continue;
      const KernelFn gemm = linear.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)];
      if (!gemm) continue;
      int result = sum;
      Node* relu = nullptr;
      if (uses[sum] == 1)
        for (Node& m : g.nodes)
          if (is_op(m, "relu") && m.inputs[0] == sum) relu = &m;
      if (relu) {
        result = relu->outputs[0];
        relu->removed = true;
        ++relus;
      }
      Node k;
      k.inputs = linear.inputs;
      k.inputs.push_back(r);
      k.inplace_input = static_cast<int>(k.inputs.size()) - 1;
      k.outputs = {result};
      k.label = relu ? "linear + residual + relu" : "linear + residual";
      k.fused_from = linear.op;
      k.attrs = {{"fused_residual", true}, {"fused_relu", relu != nullptr}};
      k.custom = fused_linear_kernel(gemm, true, relu != nullptr);
      linear = std::move(k);
      g.values[result].producer = at;
      g.values[result].output_index = 0;
      add.removed = true;
      for (Node* v : views) v->removed = true;
      ++fused;
      break;
    }
  }
  if (!fused) return "";
  return "fused " + std::to_string(fused) + " residual adds into linear layers" +
         (relus ? " (" + std::to_string(relus) + " with the ReLU after them)" : "");
}

std::string fuse_conv_activation(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  size_t convs = 0, linears = 0;
  for (Node& relu : g.nodes) {
    if (!is_op(relu, "relu")) continue;
    const int y = relu.inputs[0];
    if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
    const int at = g.values[y].producer;
    Node& producer = g.nodes[at];
    if (is_op(producer, "conv2d") && producer.attrs.get_string("activation", "none") == "none") {
      producer.attrs.set("activation", std::string("relu"));  // a oneDNN post-op
      ++convs;
    } else if (is_op(producer, "linear") && g.values[y].meta.dtype == DType::Float32) {
      const KernelFn gemm = producer.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)];
      if (!gemm) continue;
      Node k;
      k.inputs = producer.inputs;
      k.label = "linear + relu";
      k.fused_from = producer.op;
      k.attrs = {{"fused_relu", true}};
      k.custom = fused_linear_kernel(gemm, false, true);
      producer = std::move(k);
      ++linears;
    } else {
      continue;
    }
    producer.outputs = {relu.outputs[0]};
    g.values[relu.outputs[0]].producer = at;
    relu.removed = true;
  }
  std::string s;
  if (convs) s = "fused " + std::to_string(convs) + " conv2d + relu pairs";
  if (linears) s += (s.empty() ? "fused " : ", ") + std::to_string(linears) + " linear + relu pairs";
  return s;
}

std::string fuse_conv_bias_grad(Graph& g) {
  size_t fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& s = g.nodes[i];
    if (!is_op(s, "sum") || s.attrs.get_bool("keepdim", false) || s.attrs.get_ints("axes", {}) != std::vector<int64_t>{0, 2, 3})
      continue;
    const int gy = s.inputs[0];
    for (size_t j = 0; j < i; ++j) {
      Node& wg = g.nodes[j];
      if (!is_op(wg, "conv2d_weight_grad") || wg.inputs[1] != gy || wg.attrs.get_bool("with_bias", false)) continue;
      wg.attrs.set("with_bias", true);
      wg.outputs.push_back(s.outputs[0]);
      g.values[s.outputs[0]].producer = static_cast<int>(j);
      g.values[s.outputs[0]].output_index = 1;
      s.removed = true;
      ++fused;
      break;
    }
  }
  return fused ? "computed " + std::to_string(fused) + " conv bias gradients in the weight-gradient call" : "";
}

std::string fuse_pool_relu_grad(Graph& g) {
  auto uses = g.use_counts();
  size_t fused = 0;
  for (Node& rb : g.nodes) {
    if (!is_op(rb, "relu_backward")) continue;
    const int gx = rb.inputs[0], y = rb.inputs[1];
    if (g.values[gx].kind != ValueKind::Result || uses[gx] != 1) continue;
    const int at = g.values[gx].producer;
    Node& pb = g.nodes[at];
    if (!is_op(pb, "max_pool2d_backward") || pb.inputs.size() > 2) continue;
    if (g.values[y].meta.shape != g.values[gx].meta.shape) continue;
    pb.inputs.push_back(y);
    pb.outputs[0] = rb.outputs[0];
    g.values[rb.outputs[0]].producer = at;
    rb.removed = true;
    ++fused;
  }
  return fused ? "fused " + std::to_string(fused) + " relu gradients into max-pool gradients" : "";
}

std::string merge_parallel_linears(Graph& g) {
  // linear nodes by input, when weights (and biases, all or none) are constants.
  std::map<int, std::vector<int>> by_input;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_op(n, "linear") || g.values[n.inputs[1]].kind != ValueKind::Constant) continue;
    const bool bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
    if (bias && g.values[n.inputs[2]].kind != ValueKind::Constant) continue;
    by_input[n.inputs[0]].push_back(static_cast<int>(i));
  }
  NoGradGuard no_grad;
  std::vector<std::vector<Node>> insert_after(g.nodes.size());
  size_t merged = 0, groups = 0;
  for (auto& [x, members] : by_input) {
    if (members.size() < 2) continue;
    auto has_bias = [&](int i) { return g.nodes[i].inputs.size() > 2 && g.nodes[i].inputs[2] >= 0; };
    bool same = true;
    for (int i : members) same = same && has_bias(i) == has_bias(members[0]);
    if (!same) continue;
    std::vector<Tensor> ws, bs;
    for (int i : members) {
      ws.push_back(g.values[g.nodes[i].inputs[1]].tensor);
      if (has_bias(i)) bs.push_back(g.values[g.nodes[i].inputs[2]].tensor);
    }
    Node fused;
    fused.op = g.nodes[members[0]].op;
    Value w;
    w.kind = ValueKind::Constant;
    w.tensor = concat(ws, 0).contiguous();
    w.meta = {true, w.tensor.shape(), w.tensor.dtype(), w.tensor.device()};
    w.name = "merged_weight";
    const int64_t merged_width = w.tensor.shape()[0];
    fused.inputs = {x, g.add_value(std::move(w))};
    if (!bs.empty()) {
      Value b;
      b.kind = ValueKind::Constant;
      b.tensor = concat(bs, 0).contiguous();
      b.meta = {true, b.tensor.shape(), b.tensor.dtype(), b.tensor.device()};
      b.name = "merged_bias";
      fused.inputs.push_back(g.add_value(std::move(b)));
    }
    Value y;
    y.meta = g.values[g.nodes[members[0]].outputs[0]].meta;
    const int64_t last_axis = static_cast<int64_t>(y.meta.shape.size()) - 1;
    y.meta.shape.back() = merged_width;
    const int y_id = g.add_value(std::move(y));
    fused.outputs = {y_id};
    // Each former output becomes a slice of the merged one, right after it.
    auto& after = insert_after[members[0]];
    after.push_back(std::move(fused));
    int64_t at = 0;
    for (int i : members) {
      const int64_t width = g.values[g.nodes[i].inputs[1]].meta.shape[0];
      Node slice;
      slice.op = &OpRegistry::instance().get("slice");
      slice.attrs = {{"axis", last_axis}, {"start", at}, {"end", at + width}, {"step", int64_t{1}}};
      slice.inputs = {y_id};
      slice.outputs = g.nodes[i].outputs;
      after.push_back(std::move(slice));
      g.nodes[i].removed = true;
      at += width;
    }
    merged += members.size();
    ++groups;
  }
  if (!groups) return "";
  g.splice({}, std::move(insert_after));
  return "merged " + std::to_string(merged) + " linear ops that share an input into " + std::to_string(groups) +
         " (one GEMM each)";
}

namespace {

// in: x, packed w, [bias], [residual] -> y = x w^T + bias (+ residual), ReLU'd when relu.
CustomKernel packed_linear_kernel(int64_t out_features, int64_t in_features, bool residual, bool relu) {
  return [=](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const size_t operands = in.size() - (residual ? 1 : 0);
    const Tensor x = in[0].contiguous();
    const Tensor b = operands > 2 && in[2].defined() ? in[2].contiguous() : Tensor();
    float* y = out[0].data<float>();
    if (residual && in.back().data<float>() != y) std::copy_n(in.back().contiguous().data<float>(), out[0].numel(), y);
    cpu::packed_linear(x.data<float>(), x.numel() / in_features, in_features, out_features, in[1].data<float>(),
                       b.defined() ? b.data<float>() : nullptr, y, residual, relu);
  };
}

}  // namespace

std::string use_packed_linear_weights(Graph& g) {
  size_t packed = 0;
  for (auto& n : g.nodes) {
    if (n.removed || n.inputs.size() < 2) continue;
    if (!n.computes("linear")) continue;
    const bool plain = n.op != nullptr;
    const Value& w = g.values[n.inputs[1]];
    if (w.kind != ValueKind::Constant || w.meta.dtype != DType::Float32 || w.meta.shape.size() != 2 ||
        g.values[n.outputs[0]].meta.dtype != DType::Float32)
      continue;
    const bool residual = n.fused("fused_residual"), relu = n.fused("fused_relu");
    const int64_t out_features = w.meta.shape[0], in_features = w.meta.shape[1];
    // Packing once saves most where each call has few rows to amortize a
    // library GEMM's packing over; from about 1000 rows oneDNN is faster.
    const int64_t rows = in_features > 0 ? numel_of(g.values[n.inputs[0]].meta.shape) / in_features : 0;
    if (rows == 0 || rows > 512) continue;
    NoGradGuard no_grad;
    const Tensor source = w.tensor;
    const int id = n.inputs[1];
    n.inputs[1] = add_derived_constant(g, id, "linear panels", ".panels", [&] {
      Tensor t = Tensor::empty({cpu::packed_linear_weights_size(out_features, in_features)});
      cpu::pack_linear_weights(source.contiguous().data<float>(), out_features, in_features, t.data<float>());
      return t;
    });
    n.custom = packed_linear_kernel(out_features, in_features, residual, relu);
    if (plain) n.label = "linear";
    n.label += " (packed)";
    if (plain) n.fused_from = n.op;
    n.op = nullptr;
    n.attrs = {{"fused_residual", residual}, {"fused_relu", relu}};
    ++packed;
  }
  return packed ? "gave " + std::to_string(packed) + " linear layers weights packed into panels" : "";
}

}  // namespace kiln::graph

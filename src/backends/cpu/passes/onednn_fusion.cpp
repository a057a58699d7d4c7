// The CPU's fusions into vendor calls and its own kernels: convolution +
// ReLU, and linear + bias (+ residual add) (+ ReLU or GELU) as oneDNN
// post-ops, and linear layers on weights packed once for small GEMMs.
#include <algorithm>
#include <map>

#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/onednn_linear.h"
#include "backends/cpu/packed_linear.h"
#include "graph/derived_constants.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "graph/passes.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {


// in: x, w, [bias], [residual] -> y = x w^T + bias (+ residual), ReLU'd when
// relu (GELU'd when gelu): one oneDNN matmul with post-ops, or, where oneDNN
// refuses the shape, the registry's GEMM (`gemm`) and a pass over the output.
CustomKernel fused_linear_kernel(KernelFn gemm, bool residual, bool relu, bool gelu = false, bool gelu_tanh = false) {
  return [gemm, residual, relu, gelu, gelu_tanh](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const size_t operands = in.size() - (residual ? 1 : 0);
    const bool bias = operands > 2 && in[2].defined();
    const Tensor x = in[0].contiguous(), w = in[1].contiguous(), b = bias ? in[2].contiguous() : Tensor();
    float* y = out[0].data<float>();
    const int64_t features = w.shape()[1], n = out[0].numel();
    Tensor r = residual ? in.back().contiguous() : Tensor();
    if (residual && r.data<float>() != y) std::copy_n(r.data<float>(), n, y);
    cpu::onednn::LinearCall call{features ? x.numel() / features : 0, features, w.shape()[0], bias, residual, relu,
                                 gelu, gelu_tanh};
    if (features > 0 && call.rows > 0 &&
        cpu::onednn::linear_forward(call, x.data<float>(), w.data<float>(), bias ? b.data<float>() : nullptr, y))
      return;
    if (residual) r = r.clone();  // y may be the residual's own buffer, which the GEMM overwrites
    gemm(std::vector<Tensor>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(operands)), out, Attrs{});
    const float* pr = residual ? r.data<float>() : nullptr;
    parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        const float v = pr ? y[i] + pr[i] : y[i];
        y[i] = relu && v < 0.0f ? 0.0f : v;
      }
    });
    if (gelu) out[0].copy_(kiln::gelu(out[0], gelu_tanh));  // (the op's own kernel)
  };
}

}  // namespace

// A view, or a permute that moves only axes of size 1 (a sequence-first
// [L, 1, D] read as [1, L, D]), keeps its input's elements in their order.
bool keeps_element_order(const Graph& g, const Node& n) {
  if (n.is_op("view")) return true;
  if (!n.is_op("permute")) return false;
  const Shape& in = g.values[n.inputs[0]].meta.shape;
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t last = -1;
  for (int64_t axis : n.attrs.get_ints("order", {})) {
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return false;
    if (in[static_cast<size_t>(axis)] == 1) continue;
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
    if (!add.is_op("add") || add.inputs.size() != 2) continue;
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
      if (!linear.is_op("linear") || g.values[r].meta.shape != g.values[sum].meta.shape ||
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
          if (m.is_op("relu") && m.inputs[0] == sum) relu = &m;
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
      k.any_shape = true;
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
  size_t convs = 0, linears = 0, gelus = 0;
  for (Node& act : g.nodes) {
    // (A GELU goes into a linear layer only.)
    const bool gelu = act.is_op("gelu");
    const bool gelu_tanh = gelu && act.attrs.get_string("approximate", "none") == "tanh";
    if (!act.is_op("relu") && !gelu) continue;
    const int y = act.inputs[0];
    if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
    const int at = g.values[y].producer;
    Node& producer = g.nodes[at];
    if (!gelu && producer.is_op("conv2d") && producer.attrs.get_string("activation", "none") == "none") {
      producer.attrs.set("activation", std::string("relu"));  // a oneDNN post-op
      ++convs;
    } else if (producer.is_op("linear") && g.values[y].meta.dtype == DType::Float32) {
      const KernelFn gemm = producer.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)];
      if (!gemm) continue;
      Node k;
      k.inputs = producer.inputs;
      k.label = gelu ? "linear + gelu" : "linear + relu";
      k.fused_from = producer.op;
      k.attrs = {{"fused_relu", !gelu}, {"fused_gelu", gelu}, {"fused_gelu_tanh", gelu_tanh}};
      k.custom = fused_linear_kernel(gemm, false, !gelu, gelu, gelu_tanh);
      gelus += gelu;
      k.any_shape = true;
      producer = std::move(k);
      ++linears;
    } else {
      continue;
    }
    producer.outputs = {act.outputs[0]};
    g.values[act.outputs[0]].producer = at;
    act.removed = true;
  }
  std::string s;
  if (convs) s = "fused " + std::to_string(convs) + " conv2d + relu pairs";
  if (linears > gelus) s += (s.empty() ? "fused " : ", ") + std::to_string(linears - gelus) + " linear + relu pairs";
  if (gelus) s += (s.empty() ? "fused " : ", ") + std::to_string(gelus) + " linear + gelu pairs";
  return s;
}

namespace {

// in: x, packed w, [bias], [residual] -> y = x w^T + bias (+ residual), ReLU'd
// when relu, GELU'd when gelu (its tanh form with gelu_tanh).
CustomKernel packed_linear_kernel(int64_t out_features, int64_t in_features, bool residual, bool relu, bool gelu,
                                  bool gelu_tanh) {
  return [=](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const size_t operands = in.size() - (residual ? 1 : 0);
    const Tensor x = in[0].contiguous();
    const Tensor b = operands > 2 && in[2].defined() ? in[2].contiguous() : Tensor();
    float* y = out[0].data<float>();
    if (residual && in.back().data<float>() != y) std::copy_n(in.back().contiguous().data<float>(), out[0].numel(), y);
    cpu::packed_linear(x.data<float>(), x.numel() / in_features, in_features, out_features, in[1].data<float>(),
                       b.defined() ? b.data<float>() : nullptr, y, residual, relu, gelu, gelu_tanh);
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
    const bool residual = n.fused("fused_residual"), relu = n.fused("fused_relu"), gelu = n.fused("fused_gelu");
    const bool gelu_tanh = n.fused("fused_gelu_tanh");
    if (gelu && !cpu::gemm::swish_in_epilogue) continue;  // (the tile's epilogue has no GELU without AVX-512)
    const int64_t out_features = w.meta.shape[0], in_features = w.meta.shape[1];
    const int64_t rows = in_features > 0 ? numel_of(g.values[n.inputs[0]].meta.shape) / in_features : 0;
    if (rows == 0 || rows > cpu::kPackedLinearRows) continue;
    NoGradGuard no_grad;
    const Tensor source = w.tensor;
    const int id = n.inputs[1];
    n.inputs[1] = add_derived_constant(g, id, "linear panels", ".panels", [&] {
      Tensor t = Tensor::empty({cpu::packed_linear_weights_size(out_features, in_features)});
      cpu::pack_linear_weights(source.contiguous().data<float>(), out_features, in_features, t.data<float>());
      return t;
    });
    n.custom = packed_linear_kernel(out_features, in_features, residual, relu, gelu, gelu_tanh);
    n.any_shape = true;  // (its rows from x)
    if (plain) n.label = "linear";
    n.label += " (packed)";
    if (plain) n.fused_from = n.op;
    n.op = nullptr;
    n.attrs = {{"fused_residual", residual}, {"fused_relu", relu}, {"fused_gelu", gelu},
               {"fused_gelu_tanh", gelu_tanh}};
    ++packed;
  }
  return packed ? "gave " + std::to_string(packed) + " linear layers weights packed into panels" : "";
}

}  // namespace kiln::graph

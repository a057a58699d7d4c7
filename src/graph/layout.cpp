// Layout choice for inference convolution chains. oneDNN's convolutions run
// fastest on channel-blocked activations (nChw8c with AVX2); eager mode keeps
// every tensor in plain NCHW and pays a reorder on the way in and out of each
// convolution. Here, a convolution's output stays blocked when its channels
// allow, elementwise ops between convolutions (residual adds, ReLUs) run on
// the blocked data as is, and a reorder to NCHW is inserted only where
// something else reads the value. A residual add (and a ReLU after it) is
// folded into the convolution that feeds it, accumulating into the shortcut's
// buffer.
#include <algorithm>
#include <cstring>
#include <map>

#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/onednn_conv.h"
#include "graph/passes.h"
#include "kiln/autograd.h"

namespace kiln::graph {
namespace {

std::vector<int64_t> pair(const Attrs& a, const char* name, int64_t fallback) {
  auto v = a.get_ints(name, {fallback, fallback});
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

std::string layout_name(int block) { return block ? "nChw" + std::to_string(block) + "c" : std::string("nchw"); }

bool is_op(const Node& n, const char* name) { return !n.removed && n.op && n.op->name == name; }

// Elementwise ops that compute the same thing on any memory order of their operands.
bool layout_free(const Node& n) {
  if (n.removed || !n.op || n.outputs.size() != 1) return false;
  static const char* ops[] = {"add", "sub", "mul", "div", "relu", "neg", "maximum", "minimum", "sigmoid", "tanh",
                              "exp", "abs", "sqrt", "gelu", "silu", "leaky_relu", "clamp"};
  for (const char* o : ops)
    if (n.op->name == o) return true;
  return false;
}

struct ConvPlan {
  cpu::onednn::ConvShape shape;
  int src_block = 0, dst_block = 0;
  bool relu = false, bias = false;
  bool reorder_src = false;  // the source is plain and gets a reorder to blocked first
  int residual = -1;         // value id of the shortcut added to the output
};

CustomKernel conv_kernel(ConvPlan p) {
  return [p](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    float* y = out[0].data<float>();
    if (p.residual >= 0) {
      const Tensor& r = in.back();
      if (r.data<float>() != y) std::memcpy(y, r.data<float>(), static_cast<size_t>(r.numel()) * sizeof(float));
    }
    const float* bias = p.bias ? in[2].data<float>() : nullptr;
    bool ok = cpu::onednn::conv_forward_layout(p.shape, p.src_block, p.dst_block, in[0].data<float>(),
                                               in[1].data<float>(), bias, y, p.relu, p.residual >= 0);
    KILN_CHECK(ok, "oneDNN refused a blocked-layout convolution it accepted when the graph was built");
  };
}

CustomKernel max_pool_kernel(cpu::PoolWindow wd, int block) {
  return [wd, block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape &x = in[0].shape(), &y = out[0].shape();
    cpu::max_pool_blocked(in[0].data<float>(), out[0].data<float>(), x[0], x[1], x[2], x[3], y[2], y[3], block, wd);
  };
}

CustomKernel global_avg_kernel(int block) {
  return [block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& x = in[0].shape();
    cpu::global_avg_pool_blocked(in[0].data<float>(), out[0].data<float>(), x[0], x[1], x[2], x[3], block);
  };
}

// The mean over H and W of an NCHW tensor (GlobalAveragePool, adaptive pooling to 1x1).
bool global_average(const Graph& g, const Node& n) {
  if (is_op(n, "adaptive_avg_pool2d")) {
    const Shape& y = g.values[n.outputs[0]].meta.shape;
    return y.size() == 4 && y[2] == 1 && y[3] == 1;
  }
  if (!is_op(n, "mean") || g.values[n.inputs[0]].meta.shape.size() != 4) return false;
  auto axes = n.attrs.get_ints("axes", {});
  return axes == std::vector<int64_t>{2, 3} || axes == std::vector<int64_t>{-2, -1};
}

CustomKernel reorder_kernel(int from_block, int to_block) {
  return [from_block, to_block](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const Shape& s = in[0].shape();
    cpu::onednn::reorder_layout(s[0], s[1], s[2], s[3], from_block, to_block, in[0].data<float>(), out[0].data<float>());
  };
}

// A linear layer after flatten(reorder to NCHW(x)) reads the blocked x
// directly, flattened in its own order, with the weight's columns permuted
// to match: the reorder disappears (the final dead-code pass drops it).
size_t read_flattened_blocked(Graph& g, const std::map<int, int>& plain_of, int block) {
  std::map<int, int> source_of;  // plain copy -> blocked value
  for (const auto& [blocked_id, copy] : plain_of) source_of[copy] = blocked_id;
  auto uses = g.use_counts();
  size_t rewritten = 0;
  for (Node& n : g.nodes) {
    const bool linear = is_op(n, "linear") || (!n.removed && !n.op && n.label == "linear + relu");
    if (!linear || n.inputs.size() < 2) continue;
    const int flat = n.inputs[0], w = n.inputs[1];
    const Value& fv = g.values[flat];
    if (fv.kind != ValueKind::Result || uses[flat] != 1 || g.values[w].kind != ValueKind::Constant) continue;
    Node& view = g.nodes[fv.producer];
    if (!is_op(view, "view") || fv.meta.shape.size() != 2) continue;
    auto it = source_of.find(view.inputs[0]);
    if (it == source_of.end() || uses[view.inputs[0]] != 1) continue;
    const Shape& x = g.values[it->second].meta.shape;  // [N, C, H, W]
    const Tensor& weight = g.values[w].tensor;
    if (fv.meta.shape[0] != x[0] || weight.dim() != 2 || weight.shape()[1] != x[1] * x[2] * x[3]) continue;
    NoGradGuard no_grad;
    const int64_t o = weight.shape()[0];
    Tensor permuted = weight.reshape({o, x[1] / block, block, x[2], x[3]}).permute({0, 1, 3, 4, 2}).contiguous();
    Value v;
    v.kind = ValueKind::Constant;
    v.meta = {true, weight.shape(), weight.dtype(), weight.device()};
    v.tensor = permuted.reshape(weight.shape());
    v.name = (g.values[w].name.empty() ? std::string("weight") : g.values[w].name) + ".blocked";
    n.inputs[1] = g.add_value(std::move(v));
    view.inputs[0] = it->second;
    ++rewritten;
  }
  return rewritten;
}

}  // namespace

std::string choose_conv_layouts(Graph& g) {
  const int block = cpu::onednn::preferred_block();
  if (block == 0) return "";
  auto uses = g.use_counts();
  std::vector<bool> blocked(g.values.size(), false);
  std::map<int, ConvPlan> plans;  // node index -> plan
  std::map<int, cpu::PoolWindow> pools;  // node index -> max pool on blocked data
  std::vector<int> averages;             // global average pools of blocked data (plain [N, C] results)
  auto blockable = [&](const TensorMeta& m) {
    return m.dtype == DType::Float32 && m.shape.size() == 4 && m.shape[1] % block == 0;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (is_op(n, "conv2d")) {
      const TensorMeta &x = g.values[n.inputs[0]].meta, &w = g.values[n.inputs[1]].meta, &y = g.values[n.outputs[0]].meta;
      if (x.dtype != DType::Float32 || g.values[n.inputs[1]].kind != ValueKind::Constant) continue;
      auto s = pair(n.attrs, "stride", 1), p = pair(n.attrs, "padding", 0), d = pair(n.attrs, "dilation", 1);
      ConvPlan plan;
      plan.shape = {x.shape[0], x.shape[1], x.shape[2], x.shape[3], w.shape[0], w.shape[2], w.shape[3], y.shape[2],
                    y.shape[3], s[0], s[1], p[0], p[1], d[0], d[1], n.attrs.get_int("groups", 1)};
      plan.src_block = blocked[n.inputs[0]] ? block : 0;
      plan.dst_block = blockable(y) ? block : 0;
      plan.relu = n.attrs.get_string("activation", "none") == "relu";
      plan.bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
      if (plan.src_block == 0 && plan.dst_block == 0) continue;
      auto fast = [&](const ConvPlan& c) {
        return cpu::onednn::conv_layout_is_fast(c.shape, c.src_block, c.dst_block, c.bias, c.relu, c.residual >= 0);
      };
      if (!fast(plan)) {
        // oneDNN has fast kernels for plain sources only with few channels (a
        // first layer); otherwise reorder the source to blocked first.
        ConvPlan reordered = plan;
        reordered.src_block = block;
        if (plan.src_block == 0 && blockable(x) && fast(reordered)) {
          plan = reordered;
          plan.reorder_src = true;
        } else {
          continue;  // stays a plain convolution; a blocked source gets a reorder below
        }
      }
      plans[static_cast<int>(i)] = plan;
      blocked[n.outputs[0]] = plan.dst_block != 0;
    } else if (is_op(n, "max_pool2d") && blocked[n.inputs[0]] && uses[n.outputs[1]] == 0) {
      auto k = pair(n.attrs, "kernel", 1), s = pair(n.attrs, "stride", 0), p = pair(n.attrs, "padding", 0),
           d = pair(n.attrs, "dilation", 1);
      if (s[0] == 0) s = k;
      pools[static_cast<int>(i)] = {k[0], k[1], s[0], s[1], p[0], p[1], d[0], d[1]};
      blocked[n.outputs[0]] = true;
    } else if (global_average(g, n) && blocked[n.inputs[0]]) {
      averages.push_back(static_cast<int>(i));
    } else if (layout_free(n)) {
      const Shape& shape = g.values[n.outputs[0]].meta.shape;
      bool all = true, any = false;
      for (int id : n.inputs) {
        if (id < 0) continue;
        if (numel_of(g.values[id].meta.shape) == 1) continue;  // a scalar reads the same in any layout
        all = all && blocked[id] && g.values[id].meta.shape == shape;
        any = true;
      }
      blocked[n.outputs[0]] = all && any;
    }
  }
  // Residual adds (and a ReLU after them) fold into the convolution that feeds them.
  size_t residuals = 0;
  for (auto& [at, plan] : plans) {
    Node& conv = g.nodes[at];
    const int y = conv.outputs[0];
    if (plan.relu || plan.dst_block == 0 || uses[y] != 1) continue;
    Node* add = nullptr;
    for (Node& m : g.nodes)
      if (is_op(m, "add") && (m.inputs[0] == y || m.inputs[1] == y)) add = &m;
    if (!add) continue;
    const int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    if (other == y || !blocked[other] || g.values[other].meta.shape != g.values[y].meta.shape) continue;
    if (g.values[other].kind == ValueKind::Result && g.values[other].producer > at) continue;  // not computed yet
    ConvPlan with = plan;
    with.residual = other;
    with.relu = true;
    const bool relu_fast = cpu::onednn::conv_layout_is_fast(with.shape, with.src_block, with.dst_block, with.bias, true, true);
    with.relu = false;
    if (!relu_fast && !cpu::onednn::conv_layout_is_fast(with.shape, with.src_block, with.dst_block, with.bias, false, true))
      continue;
    int result = add->outputs[0];
    add->removed = true;
    Node* relu = nullptr;
    if (uses[result] == 1)
      for (Node& m : g.nodes)
        if (is_op(m, "relu") && m.inputs[0] == result) relu = &m;
    if (relu && relu_fast) {
      result = relu->outputs[0];
      relu->removed = true;
      plan.relu = true;
    }
    plan.residual = other;
    conv.outputs[0] = result;
    blocked[result] = true;
    ++residuals;
  }
  // Emit the convolutions, then a reorder to NCHW before each reader that needs it.
  std::vector<std::pair<int, int>> reorder_sources;  // (node, original source) for reorder_src plans
  for (auto& [at, plan] : plans) {
    Node& conv = g.nodes[at];
    if (plan.reorder_src) reorder_sources.push_back({at, conv.inputs[0]});
    Node k;
    k.inputs = {conv.inputs[0], conv.inputs[1]};
    if (plan.bias) k.inputs.push_back(conv.inputs[2]);
    if (plan.residual >= 0) {
      k.inputs.push_back(plan.residual);
      k.inplace_input = static_cast<int>(k.inputs.size()) - 1;
    }
    k.outputs = conv.outputs;
    k.label = "conv2d[" + layout_name(plan.src_block) + " -> " + layout_name(plan.dst_block) + "]" + (plan.residual >= 0 ? " + residual" : "") + (plan.relu ? " + relu" : "");
    k.custom = conv_kernel(plan);
    conv = std::move(k);
  }
  for (auto& [at, window] : pools) {
    Node& pool = g.nodes[at];
    Node k;
    k.inputs = {pool.inputs[0]};
    k.outputs = {pool.outputs[0]};  // the unused argmax indices are not computed
    k.label = "max_pool2d[" + layout_name(block) + "]";
    k.custom = max_pool_kernel(window, block);
    pool = std::move(k);
  }
  for (int at : averages) {
    Node& avg = g.nodes[at];
    Node k;
    k.inputs = {avg.inputs[0]};
    k.outputs = avg.outputs;
    k.label = "global_avg_pool[" + layout_name(block) + " -> nchw]";
    k.custom = global_avg_kernel(block);
    avg = std::move(k);
  }
  std::map<int, int> plain_of, blocked_of;  // a value's NCHW / blocked copy
  std::vector<std::vector<Node>> insert_after(g.nodes.size());
  std::vector<Node> prologue;  // reorders of graph inputs and constants
  // The copy of value `id` in the other layout, made once, right after its producer.
  auto reorder_copy = [&](int id, int from, int to, std::map<int, int>& copies) -> int {
    auto it = copies.find(id);
    if (it != copies.end()) return it->second;
    Value v;
    v.meta = g.values[id].meta;
    int copy = g.add_value(std::move(v));
    blocked.push_back(to != 0);
    Node r;
    r.inputs = {id};
    r.outputs = {copy};
    r.label = "reorder[" + layout_name(from) + " -> " + layout_name(to) + "]";
    r.custom = reorder_kernel(from, to);
    const Value& src = g.values[id];
    (src.kind == ValueKind::Result ? insert_after[src.producer] : prologue).push_back(std::move(r));
    copies[id] = copy;
    return copy;
  };
  auto to_blocked = [&](int id) { return reorder_copy(id, 0, block, blocked_of); };
  auto plain = [&](int id) { return reorder_copy(id, block, 0, plain_of); };
  for (auto& [at, source] : reorder_sources) g.nodes[at].inputs[0] = to_blocked(source);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.removed) continue;
    const int at = static_cast<int>(i);
    const bool pooled = pools.count(at) || std::find(averages.begin(), averages.end(), at) != averages.end();
    const bool reads_blocked = plans.count(at) || pooled || (n.op && layout_free(n) && blocked[n.outputs[0]]);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int id = n.inputs[k];
      if (id < 0 || !blocked[id]) continue;
      // A blocked convolution reads blocked data as its source and its shortcut only.
      bool ok = reads_blocked;
      if (plans.count(static_cast<int>(i))) {
        const ConvPlan& p = plans[static_cast<int>(i)];
        ok = (k == 0 && p.src_block) || (p.residual >= 0 && k + 1 == n.inputs.size());
      }
      if (!ok) n.inputs[k] = plain(id);
    }
  }
  for (int& id : g.outputs)
    if (blocked[id]) id = plain(id);
  g.splice(std::move(prologue), std::move(insert_after));
  const size_t read_blocked = read_flattened_blocked(g, plain_of, block);
  if (plans.empty()) return "";
  std::string s = std::to_string(plans.size()) + " convolutions on nChw" + std::to_string(block) + "c activations";
  if (!pools.empty() || !averages.empty())
    s += ", " + std::to_string(pools.size() + averages.size()) + " pools on them";
  if (read_blocked) s += ", " + std::to_string(read_blocked) + " linear layers reading them flattened";
  if (residuals) s += ", " + std::to_string(residuals) + " residual adds folded into them";
  s += ", " + std::to_string(plain_of.size() + blocked_of.size()) + " reorders";
  return s;
}

}  // namespace kiln::graph

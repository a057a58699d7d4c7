#include "graph/passes.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/registry.h"
#include "ops/conv_attrs.h"

namespace kiln::graph {
namespace {

std::string count_of(size_t n, const char* what) {
  std::string s = std::to_string(n);
  s += ' ';
  s += what;
  return s;
}

// The first of a constant's values, when they are first, first + 1, ... (a
// run of consecutive integers, 1-D); else -1.
int64_t consecutive_from(const Tensor& t) {
  if (t.dim() != 1 || t.numel() == 0 || (t.dtype() != DType::Int64 && t.dtype() != DType::Int32)) return -1;
  const std::vector<int64_t> v = t.to(DType::Int64).to_vector<int64_t>();
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] != v[0] + static_cast<int64_t>(i)) return -1;
  return v[0];
}

// For each value, the first small constant of the same dtype, shape and
// bytes (itself if none): exports write a constant per use (each layer's
// own 1 or -1), and the ops reading equal ones are the same op.
std::vector<int> first_equal_constant(const Graph& g, const std::vector<bool>& mutated) {
  constexpr size_t kSmall = 4096;  // bytes; weights are compared by identity alone
  std::vector<int> first(g.values.size());
  std::map<std::string, int> by_bytes;
  for (size_t id = 0; id < g.values.size(); ++id) {
    first[id] = static_cast<int>(id);
    const Value& v = g.values[id];
    if (v.kind != ValueKind::Constant || mutated[id] || !v.tensor.defined() || !v.tensor.is_contiguous() ||
        v.tensor.device().type != DeviceType::CPU)
      continue;
    const size_t bytes = static_cast<size_t>(v.tensor.numel()) * v.tensor.element_size();
    if (bytes > kSmall) continue;
    std::string key = v.tensor.meta_str();
    key.append(static_cast<const char*>(v.tensor.raw_data()), bytes);
    first[id] = by_bytes.emplace(std::move(key), static_cast<int>(id)).first->second;
  }
  return first;
}

}  // namespace

std::string eliminate_dead_code(Graph& g) {
  std::vector<int> uses = g.use_counts();
  size_t removed = 0;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    Node& n = g.nodes[i];
    if (n.removed || g.has_side_effects(n)) continue;
    bool used = false;
    for (int id : n.outputs) used = used || uses[id] > 0;
    if (used) continue;
    n.removed = true;
    ++removed;
    for (int id : n.inputs)
      if (id >= 0) --uses[id];
  }
  // Constants nothing reads any more (weights that a pass replaced by a
  // folded, transposed or reordered copy) are let go, not carried in the graph.
  for (size_t id = 0; id < g.values.size(); ++id)
    if (g.values[id].kind == ValueKind::Constant && uses[id] == 0) g.values[id].tensor = Tensor();
  return removed ? "removed " + count_of(removed, "unused ops") : "";
}

std::string eliminate_common_subexpressions(Graph& g) {
  auto mutated = g.mutated_values();
  const std::vector<int> canonical = first_equal_constant(g, mutated);
  std::map<std::string, int> seen;  // op, attributes and inputs -> node
  size_t merged = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.removed || !n.op || g.has_side_effects(n)) continue;
    bool reads_mutated = false;
    std::string key = n.op->name + "|" + n.attrs.str() + "|";
    for (int id : n.inputs) {
      key += std::to_string(id >= 0 ? canonical[id] : id) + ",";
      reads_mutated = reads_mutated || (id >= 0 && mutated[id]);
    }
    if (reads_mutated) continue;
    auto [it, inserted] = seen.emplace(key, static_cast<int>(i));
    if (inserted) continue;
    const Node& first = g.nodes[it->second];
    for (size_t k = 0; k < n.outputs.size(); ++k) replace_uses(g, n.outputs[k], first.outputs[k]);
    n.removed = true;
    ++merged;
  }
  return merged ? "merged " + count_of(merged, "repeated ops") : "";
}

std::string fold_constants(Graph& g) {
  auto mutated = g.mutated_values();
  size_t folded = 0;
  NoGradGuard no_grad;
  const OpDef& slice = OpRegistry::instance().get("slice");
  for (Node& n : g.nodes) {
    if (n.removed || !n.op || n.outputs.empty() || g.has_side_effects(n)) continue;
    bool all_const = true;
    for (int id : n.inputs) all_const = all_const && (id < 0 || (is_constant(g, id) && !mutated[id]));
    if (!all_const) continue;
    // Rows first..first + n of a table (positions from a sequence's length,
    // as exports compute them: Shape, Gather, Range) are a slice of it: a
    // view whose end a graph generalized over lengths follows, where the
    // rows copied out would be a constant of each length.
    if (n.op->name == "embedding" && n.attrs.get_int("padding_idx", -1) < 0) {
      const Tensor& table = g.values[n.inputs[0]].tensor;
      const int64_t first = consecutive_from(g.values[n.inputs[1]].tensor);
      const int64_t count = g.values[n.inputs[1]].tensor.numel();
      if (first >= 0 && table.dim() == 2 && first + count <= table.shape()[0]) {
        n.op = &slice;
        n.inputs = {n.inputs[0]};
        n.attrs = Attrs{{"axis", int64_t{0}}, {"start", first}, {"end", first + count}, {"step", int64_t{1}}};
        continue;
      }
    }
    std::vector<Tensor> ins;
    for (int id : n.inputs) ins.push_back(id >= 0 ? g.values[id].tensor : Tensor());
    std::vector<Tensor> outs = call(*n.op, ins, n.attrs);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      Value& v = g.values[n.outputs[k]];
      v.kind = ValueKind::Constant;
      v.tensor = outs[k].is_contiguous() ? outs[k] : outs[k].contiguous();
      v.producer = -1;
    }
    n.removed = true;
    ++folded;
  }
  return folded ? "computed " + count_of(folded, "ops on constants at compile time") : "";
}

std::string simplify_algebra(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  size_t simplified = 0;
  for (Node& n : g.nodes) {
    if (n.removed || !n.op || n.outputs.size() != 1) continue;
    const std::string& op = n.op->name;
    const int out = n.outputs[0];
    int keep = -1;  // the input the node reduces to
    if (op == "add" || op == "sub" || op == "mul" || op == "div") {
      const int a = n.inputs[0], b = n.inputs[1];
      const double identity = (op == "add" || op == "sub") ? 0.0 : 1.0;
      auto same_meta = [&](int id) {
        return g.values[id].meta.shape == g.values[out].meta.shape && g.values[id].meta.dtype == g.values[out].meta.dtype;
      };
      if (constant_scalar(g, b) == identity && same_meta(a)) keep = a;
      else if ((op == "add" || op == "mul") && constant_scalar(g, a) == identity && same_meta(b)) keep = b;
    } else if (op == "pad") {
      // Padding by nothing (torch.onnx.export writes one before each pool of DenseNet's transitions).
      const auto pads = n.attrs.get_ints("pads", {});
      if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }) &&
          g.values[n.inputs[0]].meta.shape == g.values[out].meta.shape)
        keep = n.inputs[0];
    } else if (op == "index_select" && n.inputs.size() == 2 && is_constant(g, n.inputs[1]) && !mutated[out] &&
               !mutated[n.inputs[0]]) {
      // Taking a run of consecutive entries along an axis (PyTorch exports
      // `qkv[0]` as a Gather by one index: Swin's query, key and value, a
      // copy each) is a slice, a view.
      const Tensor& index = g.values[n.inputs[1]].tensor;
      const Shape& x = g.values[n.inputs[0]].meta.shape;
      const int64_t axis = n.attrs.get_int("axis"), first = consecutive_from(index);
      const int64_t at = axis < 0 ? axis + static_cast<int64_t>(x.size()) : axis;
      if (first >= 0 && at >= 0 && at < static_cast<int64_t>(x.size()) && first + index.numel() <= x[at]) {
        n.op = &OpRegistry::instance().get("slice");
        n.inputs = {n.inputs[0]};
        n.attrs = Attrs{{"axis", at}, {"start", first}, {"end", first + index.numel()}, {"step", int64_t{1}}};
        ++simplified;
      }
      continue;
    } else if (op == "copy") {
      // A copy of a buffer that nothing else reads or writes is the buffer itself.
      const int x = n.inputs[0];
      const Value& v = g.values[x];
      if (v.kind == ValueKind::Result && !g.nodes[v.producer].is_view() && uses[x] == 1 && !mutated[x] && !mutated[out])
        keep = x;
    }
    if (keep < 0 || mutated[out]) continue;
    replace_uses(g, out, keep);
    n.removed = true;
    ++simplified;
  }
  if (!simplified) return "";
  return "simplified " +
         count_of(simplified, "ops (x+0, x*1, copies of temporaries, pads by 0; runs of indices taken as slices)");
}

// The kernel taps of one spatial axis that read the input at some output
// position: a contiguous range [first, last] (a tap reads input row
// o * stride - padding + tap * dilation). Empty (first > last) when none does.
std::pair<int64_t, int64_t> taps_inside(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                                        int64_t dilation) {
  int64_t first = kernel, last = -1;
  for (int64_t t = 0; t < kernel; ++t) {
    const int64_t lowest = t * dilation - padding, highest = (out - 1) * stride + lowest;
    if (highest >= 0 && lowest <= in - 1) first = std::min(first, t), last = std::max(last, t);
  }
  return {first, last};
}

std::string drop_taps_in_padding(Graph& g) {
  size_t dropped = 0;
  NoGradGuard no_grad;
  for (Node& n : g.nodes) {
    if (n.removed || !n.op || n.op->name != "conv2d" || n.inputs.size() < 2 || !is_constant(g, n.inputs[1])) continue;
    const Shape &x = g.values[n.inputs[0]].meta.shape, &y = g.values[n.outputs[0]].meta.shape;
    const Tensor& w = g.values[n.inputs[1]].tensor;
    if (x.size() != 4 || w.dim() != 4) continue;
    const Conv2dAttrs a = Conv2dAttrs::of(n.attrs);
    std::array<std::pair<int64_t, int64_t>, 2> kept;
    bool fewer = false, possible = true;
    for (int i = 0; i < 2; ++i) {
      kept[i] = taps_inside(x[2 + i], y[2 + i], w.shape()[2 + i], a.stride[i], a.padding[i], a.dilation[i]);
      // The smaller kernel's padding: the taps dropped in front took that much of it.
      const int64_t padding = a.padding[i] - kept[i].first * a.dilation[i], k = kept[i].second - kept[i].first + 1;
      possible = possible && kept[i].first <= kept[i].second && padding >= 0 &&
                 (x[2 + i] + 2 * padding - a.dilation[i] * (k - 1) - 1) / a.stride[i] + 1 == y[2 + i];
      fewer = fewer || k < w.shape()[2 + i];
    }
    if (!possible || !fewer) continue;
    Tensor sub = w.slice(2, kept[0].first, kept[0].second + 1).slice(3, kept[1].first, kept[1].second + 1).contiguous();
    n.inputs[1] = add_constant(g, sub, "taps_inside");
    std::vector<int64_t> padding(2), dilation(2);
    for (int i = 0; i < 2; ++i) {
      padding[i] = a.padding[i] - kept[i].first * a.dilation[i];
      dilation[i] = kept[i].first == kept[i].second ? 1 : a.dilation[i];
    }
    n.attrs.set("padding", padding);
    n.attrs.set("dilation", dilation);
    ++dropped;
  }
  return dropped ? "narrowed " + count_of(dropped, "dilated convolutions to the taps that reach the input") : "";
}

namespace {
bool is_view_op(const Node& n) { return !n.removed && n.op && n.op->name == "view" && n.inputs.size() == 1; }
}  // namespace

std::string fold_views(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  size_t folded = 0;
  auto shape = [&](int id) -> const Shape& { return g.values[id].meta.shape; };
  // The value a view node reads, when that is a view's output read by nothing else.
  auto view_source = [&](int id) -> int {
    const Value& v = g.values[id];
    if (v.kind != ValueKind::Result || uses[id] != 1 || mutated[id]) return -1;
    const Node& p = g.nodes[v.producer];
    return is_view_op(p) && !mutated[p.inputs[0]] ? p.inputs[0] : -1;
  };
  for (Node& n : g.nodes) {
    if (!is_view_op(n) || mutated[n.outputs[0]]) continue;
    const int out = n.outputs[0];
    // view(view(z)) back to z's shape is z.
    const int z = view_source(n.inputs[0]);
    if (z >= 0 && shape(z) == shape(out)) {
      replace_uses(g, out, z);
      n.removed = true;
      ++folded;
      continue;
    }
    // view(e(view(z), scalars...)) back to z's shape, e elementwise: e(z).
    const Value& ev = g.values[n.inputs[0]];
    if (ev.kind != ValueKind::Result || uses[n.inputs[0]] != 1 || mutated[n.inputs[0]]) continue;
    Node& e = g.nodes[ev.producer];
    if (e.removed || !e.op || !e.op->has_tag(kTagElementwise) || e.outputs.size() != 1 || e.op->writes_with(e.attrs))
      continue;
    int at = -1, source = -1;
    bool others_scalar = true;
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const int id = e.inputs[k];
      if (id < 0 || numel_of(shape(id)) == 1) continue;
      if (at >= 0) others_scalar = false;
      at = static_cast<int>(k);
    }
    if (at < 0 || !others_scalar || (source = view_source(e.inputs[at])) < 0 || shape(source) != shape(out)) continue;
    e.inputs[at] = source;
    g.values[e.outputs[0]].meta.shape = shape(source);
    replace_uses(g, out, e.outputs[0]);
    n.removed = true;
    ++folded;
  }
  return folded ? "removed " + count_of(folded, "pairs of views around elementwise ops or each other") : "";
}

std::string fold_batch_norm(Graph& g) {
  auto uses = g.use_counts();
  size_t folded = 0;
  NoGradGuard no_grad;
  for (Node& bn : g.nodes) {
    if (bn.removed || !bn.op || bn.op->name != "batch_norm" || bn.attrs.get_bool("training", true)) continue;
    const int y = bn.inputs[0];
    if (y < 0 || g.values[y].kind != ValueKind::Result || uses[y] != 1) continue;
    Node& conv = g.nodes[g.values[y].producer];
    if (conv.removed || !conv.op || conv.op->name != "conv2d")
      continue;
    bool consts = is_constant(g, conv.inputs[1]) && (conv.inputs.size() < 3 || conv.inputs[2] < 0 || is_constant(g, conv.inputs[2]));
    for (size_t i = 1; i < bn.inputs.size(); ++i) consts = consts && (bn.inputs[i] < 0 || is_constant(g, bn.inputs[i]));
    if (!consts || bn.inputs.size() < 5 || bn.inputs[3] < 0 || bn.inputs[4] < 0) continue;
    if (uses[bn.outputs[1]] || uses[bn.outputs[2]]) continue;
    // y = (conv(x, w) + b - mean) * gamma / sqrt(var + eps) + beta
    const Tensor& w = g.values[conv.inputs[1]].tensor;
    const int64_t o = w.shape()[0];
    Tensor mean = g.values[bn.inputs[3]].tensor, var = g.values[bn.inputs[4]].tensor;
    Tensor gamma = bn.inputs[1] >= 0 ? g.values[bn.inputs[1]].tensor : ones({o}, w.dtype());
    Tensor beta = bn.inputs[2] >= 0 ? g.values[bn.inputs[2]].tensor : zeros({o}, w.dtype());
    Tensor b = conv.inputs.size() > 2 && conv.inputs[2] >= 0 ? g.values[conv.inputs[2]].tensor : zeros({o}, w.dtype());
    Tensor scale = gamma / sqrt(var + scalar_tensor(bn.attrs.get_float("eps", 1e-5), var.dtype()));
    Tensor new_w = (w * scale.reshape({o, 1, 1, 1})).contiguous();
    Tensor new_b = ((b - mean) * scale + beta).contiguous();
    conv.inputs.resize(3);
    conv.inputs[1] = add_constant(g, new_w, "folded_weight");
    conv.inputs[2] = add_constant(g, new_b, "folded_bias");
    replace_uses(g, bn.outputs[0], y);
    bn.removed = true;
    ++folded;
  }
  return folded ? "folded " + count_of(folded, "batch norms into their convolutions") : "";
}

}  // namespace kiln::graph

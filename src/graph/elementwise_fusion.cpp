// Elementwise fusion: the groups, found on any backend, and the expression
// each becomes; the graph's backend lowers it (elementwise_fusion.h).
#include "graph/elementwise_fusion.h"

#include <algorithm>
#include <array>

#include "graph/passes.h"

namespace kiln::graph {
namespace {

// An op joins a fused loop when its definition has a float formula
// (OpDef::math) and the fusible tag.
bool fusible(const Node& n) { return n.op && n.op->math && n.op->has_tag(kTagFusible); }

struct Lowering {
  ElementwiseLowering lower = nullptr;
  std::vector<DType> dtypes;
};

std::array<Lowering, kNumDeviceTypes>& lowerings() {
  static std::array<Lowering, kNumDeviceTypes> table{};
  return table;
}

// The lowering of the graph's backend (its inputs' device, or its parameters'), if it has one.
const Lowering& lowering_for(const Graph& g) {
  if (!g.inputs.empty()) return lowerings()[static_cast<int>(g.values[g.inputs[0]].meta.device.type)];
  for (const auto& v : g.values)
    if (v.kind == ValueKind::Param) return lowerings()[static_cast<int>(v.meta.device.type)];
  return lowerings()[static_cast<int>(DeviceType::CPU)];
}

}  // namespace

void register_elementwise_lowering(DeviceType backend, ElementwiseLowering lower, std::vector<DType> dtypes) {
  lowerings()[static_cast<int>(backend)] = {lower, std::move(dtypes)};
}

std::string fuse_elementwise(Graph& g) {
  const Lowering& lowering = lowering_for(g);
  if (lowering.lower == nullptr) return "";
  auto takes = [&](DType d) {
    return std::find(lowering.dtypes.begin(), lowering.dtypes.end(), d) != lowering.dtypes.end();
  };
  auto uses = g.use_counts();
  const std::vector<bool> mutated = g.written_through_views();  // a fused loop reads its inputs later
  // group[node] = index of the fused group a node's result feeds into, built in order.
  struct Group {
    std::vector<int> nodes;  // in execution order; the last produces the group's result
  };
  std::vector<int> group_of(g.nodes.size(), -1);
  std::vector<Group> groups;
  // An input fits when it has the output's dtype and is equal or
  // broadcastable to the shape; a lowering reads views through their strides.
  const auto full_shape = [&](int id, const Shape& shape, DType dtype) {
    const Value& v = g.values[id];
    if (v.meta.dtype != dtype || shape.size() > 16) return false;
    if (numel_of(v.meta.shape) == 1) return true;
    if (v.meta.shape.size() > shape.size()) return false;
    for (size_t k = 0; k < v.meta.shape.size(); ++k) {
      int64_t d = v.meta.shape[k], o = shape[shape.size() - v.meta.shape.size() + k];
      if (d != o && d != 1) return false;
    }
    return true;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.removed || n.outputs.size() != 1 || !fusible(n)) continue;
    const Shape& shape = g.values[n.outputs[0]].meta.shape;
    const DType dtype = g.values[n.outputs[0]].meta.dtype;
    if (!takes(dtype) || mutated[n.outputs[0]]) continue;
    bool ok = true;
    for (int id : n.inputs) ok = ok && id >= 0 && full_shape(id, shape, dtype) && !mutated[id];
    if (!ok) continue;
    // Join the groups of inputs computed by fusible nodes and used only here
    // (two such groups merge: their nodes are independent and all precede this one).
    int joined = -1;
    for (int id : n.inputs) {
      const Value& v = g.values[id];
      if (v.kind != ValueKind::Result || uses[id] != 1 || v.meta.shape != shape) continue;
      int gi = group_of[v.producer];
      if (gi < 0 || groups[gi].nodes.back() != v.producer || gi == joined) continue;
      if (joined < 0) {
        joined = gi;
        continue;
      }
      if (groups[joined].nodes.size() + groups[gi].nodes.size() >= kMaxFusedSteps) continue;
      auto& into = groups[joined].nodes;
      for (int m : groups[gi].nodes) {
        into.push_back(m);
        group_of[m] = joined;
      }
      std::sort(into.begin(), into.end());
      groups[gi].nodes.clear();
    }
    if (joined < 0 || groups[joined].nodes.size() >= kMaxFusedSteps) {
      joined = static_cast<int>(groups.size());
      groups.push_back({});
    }
    groups[joined].nodes.push_back(static_cast<int>(i));
    group_of[i] = joined;
  }
  size_t fused_groups = 0, fused_ops = 0;
  for (Group& grp : groups) {
    if (grp.nodes.size() < 2) continue;
    Node& last = g.nodes[grp.nodes.back()];
    std::vector<int> external;
    ElementwiseExpression expression;
    expression.dtype = g.values[last.outputs[0]].meta.dtype;
    std::vector<int> produced;  // value id produced by each step
    std::string label = "fused(";
    using Operand = ElementwiseExpression::Operand;
    auto operand = [&](int id) {
      for (size_t k = 0; k < produced.size(); ++k)
        if (produced[k] == id) return Operand{false, static_cast<int>(k)};
      for (size_t k = 0; k < external.size(); ++k)
        if (external[k] == id) return Operand{true, static_cast<int>(k)};
      external.push_back(id);
      return Operand{true, static_cast<int>(external.size()) - 1};
    };
    for (size_t k = 0; k < grp.nodes.size(); ++k) {
      const Node& n = g.nodes[grp.nodes[k]];
      ElementwiseExpression::Step step;
      step.op = n.op;
      step.attrs = n.attrs;
      step.a = operand(n.inputs[0]);
      if (n.op->math.arity > 1) step.b = operand(n.inputs[1]);
      expression.steps.push_back(std::move(step));
      produced.push_back(n.outputs[0]);
      label += (k ? ", " : "") + n.op->name;
    }
    label += ")";
    Node fused;
    fused.custom = lowering.lower(expression);
    if (!fused.custom) continue;  // the backend cannot run this expression: its ops stay
    fused.inputs = external;
    fused.outputs = last.outputs;
    fused.any_shape = true;  // a lowering's kernel takes its sizes from its tensors
    fused.label = label;
    for (int idx : grp.nodes) g.nodes[idx].removed = true;
    const int at = grp.nodes.back();
    g.nodes[at] = std::move(fused);
    g.values[g.nodes[at].outputs[0]].producer = at;
    ++fused_groups;
    fused_ops += grp.nodes.size();
  }
  return fused_groups ? "fused " + std::to_string(fused_ops) + " elementwise ops into " + std::to_string(fused_groups) +
                            " loops"
                      : "";
}

}  // namespace kiln::graph

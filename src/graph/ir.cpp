#include "graph/ir.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kiln/grad_mode.h"

namespace kiln::graph {
namespace {

}  // namespace

std::vector<int> written_inputs(const Node& n) {
  // A kernel standing for an op (fused_from) keeps that op's inputs in place and writes what it writes.
  const OpDef* op = n.op ? n.op : n.fused_from;
  if (!op) return {};
  std::vector<int> ids;
  for (int i : op->written(n.attrs, n.inputs.size()))
    if (static_cast<size_t>(i) < n.inputs.size() && n.inputs[i] >= 0) ids.push_back(n.inputs[i]);
  return ids;
}

namespace {

std::string value_ref(const Graph& g, int id) {
  if (id < 0) return "none";
  const Value& v = g.values[id];
  std::string s = "%";
  s += std::to_string(id);
  if (!v.name.empty()) {
    s += ':';
    s += v.name;
  }
  return s;
}

const char* kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::Input: return "input";
    case ValueKind::Param: return "param";
    case ValueKind::Constant: return "const";
    case ValueKind::Result: return "result";
  }
  return "?";
}

}  // namespace

int Graph::add_value(Value v) {
  values.push_back(std::move(v));
  return static_cast<int>(values.size()) - 1;
}

bool is_constant(const Graph& g, int id) { return id >= 0 && g.values[id].kind == ValueKind::Constant; }

double constant_scalar(const Graph& g, int id) {
  if (!is_constant(g, id) || g.values[id].tensor.numel() != 1) return std::nan("");
  NoGradGuard no_grad;
  return g.values[id].tensor.to(DType::Float64).reshape({}).item<double>();
}

int add_constant(Graph& g, const Tensor& t, std::string name) {
  Value v;
  v.kind = ValueKind::Constant;
  v.meta = {true, t.shape(), t.dtype(), t.device()};
  v.tensor = t;
  v.name = std::move(name);
  return g.add_value(std::move(v));
}

bool Graph::has_side_effects(const Node& n) const {
  if (n.removed) return false;
  if (n.op && n.op->has_tag(kTagRandom)) return true;
  return !written_inputs(n).empty();
}

std::vector<bool> Graph::mutated_values() const {
  std::vector<bool> m(values.size(), false);
  for (const Node& n : nodes)
    if (!n.removed)
      for (int id : written_inputs(n)) m[id] = true;
  return m;
}

namespace {
// The value a view reads through its chain of views (itself if none).
int storage_root(const Graph& g, int id) {
  for (;;) {
    const Value& v = g.values[id];
    if (v.kind != ValueKind::Result || v.producer < 0 || v.producer >= static_cast<int>(g.nodes.size())) return id;
    const Node& producer = g.nodes[v.producer];
    if (producer.removed || !producer.is_view() || producer.inputs.empty() || producer.inputs[0] < 0 ||
        std::find(producer.outputs.begin(), producer.outputs.end(), id) == producer.outputs.end())
      return id;
    id = producer.inputs[0];
  }
}
}  // namespace

std::vector<bool> Graph::written_through_views() const {
  const std::vector<bool> written = mutated_values();
  std::vector<int> root(values.size());
  std::vector<bool> root_written(values.size(), false);
  for (size_t id = 0; id < values.size(); ++id) {
    root[id] = storage_root(*this, static_cast<int>(id));
    if (written[id]) root_written[root[id]] = true;
  }
  std::vector<bool> out(values.size());
  for (size_t id = 0; id < values.size(); ++id) out[id] = root_written[root[id]];
  return out;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> uses(values.size(), 0);
  for (const Node& n : nodes)
    if (!n.removed)
      for (int id : n.inputs)
        if (id >= 0) ++uses[id];
  for (int id : outputs) ++uses[id];
  return uses;
}

std::vector<std::vector<int>> Graph::readers() const {
  std::vector<std::vector<int>> out(values.size());
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!nodes[i].removed)
      for (int v : nodes[i].inputs)
        if (v >= 0) out[v].push_back(static_cast<int>(i));
  return out;
}

int Graph::sole_reader(int id, const std::vector<int>& uses) const {
  if (uses[id] != 1) return -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!n.removed && std::find(n.inputs.begin(), n.inputs.end(), id) != n.inputs.end()) return static_cast<int>(i);
  }
  return -1;
}

void Graph::splice(std::vector<Node> prologue, std::vector<std::vector<Node>> after) {
  std::vector<Node> kept = std::move(prologue);
  kept.reserve(kept.size() + nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!nodes[i].removed) kept.push_back(std::move(nodes[i]));
    if (i < after.size())
      for (Node& n : after[i]) kept.push_back(std::move(n));
  }
  nodes = std::move(kept);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t k = 0; k < nodes[i].outputs.size(); ++k) {
      values[nodes[i].outputs[k]].producer = static_cast<int>(i);
      values[nodes[i].outputs[k]].output_index = static_cast<int>(k);
    }
}

size_t Graph::live_nodes() const {
  size_t n = 0;
  for (const Node& node : nodes) n += node.removed ? 0 : 1;
  return n;
}

std::string Graph::text() const {
  std::ostringstream os;
  for (int id : inputs) os << value_ref(*this, id) << " = input : " << dtype_name(values[id].meta.dtype) << shape_str(values[id].meta.shape) << "\n";
  for (size_t id = 0; id < values.size(); ++id) {
    const Value& v = values[id];
    if (v.kind != ValueKind::Param && v.kind != ValueKind::Constant) continue;
    os << value_ref(*this, static_cast<int>(id)) << " = " << kind_name(v.kind) << " : " << dtype_name(v.meta.dtype)
       << shape_str(v.meta.shape) << "\n";
  }
  for (const Node& n : nodes) {
    if (n.removed) continue;
    for (size_t i = 0; i < n.outputs.size(); ++i) os << (i ? ", " : "") << value_ref(*this, n.outputs[i]);
    os << (n.outputs.empty() ? "" : " = ") << n.name() << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i) os << (i ? ", " : "") << value_ref(*this, n.inputs[i]);
    os << ")";
    if (!n.attrs.items().empty()) os << " {" << n.attrs.str() << "}";
    if (!n.outputs.empty()) {
      os << " :";
      for (int id : n.outputs) {
        os << " " << dtype_name(values[id].meta.dtype) << shape_str(values[id].meta.shape);
        if (!values[id].layout.empty()) os << " " << values[id].layout;
      }
    }
    if (n.made_by) os << "  # " << device_type_name(*n.made_by) << " kernel";
    os << "\n";
  }
  os << "return";
  for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : " ") << value_ref(*this, outputs[i]);
  os << "\n";
  return os.str();
}

std::string Graph::dot() const {
  std::ostringstream os;
  os << "digraph kiln {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  std::vector<bool> drawn(values.size(), false);
  auto draw_value = [&](int id) {
    if (id < 0 || drawn[id] || values[id].kind == ValueKind::Result) return;
    drawn[id] = true;
    const Value& v = values[id];
    os << "  v" << id << " [shape=ellipse, label=\"" << (v.name.empty() ? kind_name(v.kind) : v.name) << "\\n"
       << dtype_name(v.meta.dtype) << shape_str(v.meta.shape) << "\"];\n";
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.removed) continue;
    os << "  n" << i << " [shape=box, label=\"" << n.name() << "\"];\n";
    for (int id : n.inputs) {
      if (id < 0) continue;
      draw_value(id);
      const Value& v = values[id];
      if (v.kind == ValueKind::Result)
        os << "  n" << v.producer << " -> n" << i << " [label=\"" << shape_str(v.meta.shape) << "\"];\n";
      else
        os << "  v" << id << " -> n" << i << ";\n";
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Value& v = values[outputs[i]];
    os << "  out" << i << " [shape=doublecircle, label=\"output " << i << "\"];\n";
    if (v.kind == ValueKind::Result) os << "  n" << v.producer << " -> out" << i << ";\n";
  }
  os << "}\n";
  return os.str();
}

void replace_uses(Graph& g, int from, int to) {
  for (Node& n : g.nodes)
    if (!n.removed)
      for (int& id : n.inputs)
        if (id == from) id = to;
  for (int& id : g.outputs)
    if (id == from) id = to;
}

}  // namespace kiln::graph

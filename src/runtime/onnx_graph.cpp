#include "runtime/onnx_graph.h"

#include <set>

namespace kiln::runtime {
namespace {

bool holds_graphs(const ::onnx::AttributeProto& a) { return a.has_g() || a.graphs_size() > 0; }

// A graph input of bool or integer type: a flag or a count, whose values a
// branch or a trip count may be fixed to per compiled graph. A branch taken on
// float data (a score over a threshold) runs node by node instead of compiling
// a graph per input value.
bool is_flag_or_count(const ::onnx::ValueInfoProto& v) {
  const int t = v.type().tensor_type().elem_type();
  return t == ::onnx::TensorProto::BOOL || t == ::onnx::TensorProto::INT32 || t == ::onnx::TensorProto::INT64 ||
         t == ::onnx::TensorProto::UINT8 || t == ::onnx::TensorProto::INT8;
}

}  // namespace

void find_unsupported(const ::onnx::GraphProto& graph, const std::map<std::string, int>& opsets,
                      std::map<std::string, std::vector<std::string>>& missing, std::set<std::string>& types) {
  for (const auto& n : graph.node()) {
    for (const auto& a : n.attribute()) {
      if (a.has_g()) find_unsupported(a.g(), opsets, missing, types);
      for (const auto& g : a.graphs()) find_unsupported(g, opsets, missing, types);
    }
    std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    if (find_converter(domain, n.op_type()) || (domain.empty() && control_flow_ops().count(n.op_type()))) continue;
    auto it = opsets.find(domain);
    int version = it == opsets.end() ? 0 : it->second;
    std::string type = (domain.empty() ? "" : domain + "::") + n.op_type();
    missing[type + " (opset " + std::to_string(version) + ")"].push_back(n.name().empty() ? "<unnamed>" : n.name());
    types.insert(type);
  }
}

int OnnxGraph::define(const std::string& name, const std::string& by) {
  KILN_CHECK(!name.empty(), what_, ": ", by, " defines a value with an empty name");
  KILN_CHECK(!slot_.count(name), what_, ": value '", name, "' is defined twice (by ", by, "); the graph is malformed");
  int id = static_cast<int>(constants_.size());
  slot_[name] = id;
  constants_.emplace_back();
  return id;
}

int OnnxGraph::resolve(const std::string& name) {
  auto it = slot_.find(name);
  if (it != slot_.end()) return it->second;
  if (outer_ == nullptr) return -1;
  int outer_slot = outer_->resolve(name);
  if (outer_slot < 0) return -1;
  int own = define(name, "the enclosing graph");
  captures_.emplace_back(outer_slot, own);
  return own;
}

OnnxGraph::OnnxGraph(const ::onnx::GraphProto& g, int opset, const std::string& what, OnnxGraph* outer)
    : proto_(&g), opset_(opset), what_(what), outer_(outer) {
  const std::string graph_name = outer ? "subgraph '" + g.name() + "'" : "graph";
  std::set<std::string> initialized;
  for (const auto& init : g.initializer()) {
    int id = define(init.name(), "an initializer of the " + graph_name);
    constants_[id] = onnx_io::from_proto(init, what + ": initializer");
    initialized.insert(init.name());
  }
  for (const auto& in : g.input()) {
    if (initialized.count(in.name())) continue;  // an initializer listed as an input (older IR versions)
    input_protos_.push_back(&in);
    input_slots_.push_back(define(in.name(), "an input of the " + graph_name));
  }
  for (const auto& n : g.node()) {
    Step step{&n, nullptr, nullptr, {}, {}, {}, {}};
    auto cf = control_flow_ops().find(n.op_type());
    if (cf != control_flow_ops().end()) {
      step.control = cf->second;
      for (const auto& a : n.attribute()) {
        KILN_CHECK(!(a.graphs_size() > 0), what, ": node '", n.name(), "' (", n.op_type(), ") has a list of graphs in '",
                   a.name(), "'; If, Loop and Scan take one graph per attribute");
        if (holds_graphs(a)) step.subgraphs[a.name()] = std::make_unique<OnnxGraph>(a.g(), opset, what, this);
      }
    } else {
      step.convert = find_converter(n.domain() == "ai.onnx" ? "" : n.domain(), n.op_type());
      KILN_CHECK(step.convert, what, ": node '", n.name(), "' (", n.op_type(), ") has no converter");
    }
    std::string who = "node '" + n.name() + "' (" + n.op_type() + ")";
    for (const auto& name : n.input()) {
      if (name.empty()) {
        step.inputs.push_back(-1);
        continue;
      }
      int id = resolve(name);
      KILN_CHECK(id >= 0, what, ": ", who, " reads '", name,
                 "', which no earlier node, input or initializer defines (the graph is malformed or not in "
                 "topological order)");
      step.inputs.push_back(id);
    }
    for (const auto& name : n.output()) step.outputs.push_back(name.empty() ? -1 : define(name, who));
    steps_.push_back(std::move(step));
  }
  for (const auto& out : g.output()) {
    int id = resolve(out.name());
    KILN_CHECK(id >= 0, what, ": ", graph_name, " output '", out.name(), "' is not produced by any node");
    output_slots_.push_back(id);
  }
  KILN_CHECK(!output_slots_.empty(), what, ": the ", graph_name, " has no outputs");
  plan_releases();
}

// Each intermediate value is dropped after the last step that reads it: run
// eagerly (and when traced), a model otherwise holds every activation to the
// end (1.3 GB for a 4-layer encoder at batch 64). A control-flow step also
// reads what its subgraphs capture.
void OnnxGraph::plan_releases() {
  std::vector<int> last_use(constants_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    for (int v : steps_[i].inputs)
      if (v >= 0) last_use[v] = static_cast<int>(i);
    for (const auto& [name, sub] : steps_[i].subgraphs)
      for (const auto& [outer_slot, own] : sub->captures_) last_use[outer_slot] = static_cast<int>(i);
  }
  for (int v : output_slots_) last_use[v] = static_cast<int>(steps_.size());
  for (const auto& [outer_slot, own] : captures_) last_use[own] = static_cast<int>(steps_.size());
  for (size_t v = 0; v < last_use.size(); ++v)
    if (last_use[v] >= 0 && last_use[v] < static_cast<int>(steps_.size()) && !constants_[v].defined())
      steps_[last_use[v]].release.push_back(static_cast<int>(v));
}

std::vector<bool> OnnxGraph::reaches_value_inputs(const std::vector<int>& seeds,
                                                  const std::vector<bool>& control_may_bind) const {
  std::vector<std::set<int>> depends(constants_.size());
  for (size_t i = 0; i < seeds.size(); ++i) depends[seeds[i]].insert(static_cast<int>(i));
  std::vector<bool> bound(seeds.size(), false);
  auto bind = [&](int slot, bool by_control) {
    for (int i : depends[slot]) bound[i] = bound[i] || !by_control || control_may_bind[i];
  };
  for (const Step& step : steps_) {
    const std::string& op = step.proto->op_type();
    std::set<int> merged;
    std::vector<int> reads = step.inputs;
    for (const auto& [name, sub] : step.subgraphs) {
      std::vector<int> outer_slots, own_slots;
      for (const auto& [outer_slot, own] : sub->captures_) {
        outer_slots.push_back(outer_slot);
        own_slots.push_back(own);
      }
      std::vector<bool> read = sub->reaches_value_inputs(own_slots, std::vector<bool>(own_slots.size(), false));
      for (size_t k = 0; k < outer_slots.size(); ++k)
        if (read[k]) bind(outer_slots[k], false);
      reads.insert(reads.end(), outer_slots.begin(), outer_slots.end());
    }
    if (op != "Shape" && op != "Size")
      for (int v : reads)
        if (v >= 0) merged.insert(depends[v].begin(), depends[v].end());
    for (int v : step.outputs)
      if (v >= 0) depends[v] = merged;
    for (int pos : value_inputs(op))
      if (pos < static_cast<int>(step.inputs.size()) && step.inputs[pos] >= 0) bind(step.inputs[pos], step.control);
  }
  return bound;
}

std::vector<bool> OnnxGraph::inputs_bound_by_value() const {
  std::vector<bool> flags;
  for (const auto* in : input_protos_) flags.push_back(is_flag_or_count(*in));
  return reaches_value_inputs(input_slots_, flags);
}

std::vector<Tensor> OnnxGraph::run(const std::vector<Tensor>& in, const std::vector<Tensor>& outer) const {
  KILN_ASSERT(in.size() == input_slots_.size(), "OnnxGraph::run: ", in.size(), " inputs for ", input_slots_.size());
  std::vector<Tensor> values = constants_;
  for (const auto& [outer_slot, own] : captures_) values[own] = outer.at(outer_slot);
  for (size_t i = 0; i < in.size(); ++i) values[input_slots_[i]] = in[i];
  std::vector<Tensor> args;
  for (const Step& s : steps_) {
    OnnxNode node(*s.proto, opset_);
    args.clear();
    for (int v : s.inputs) args.push_back(v >= 0 ? values[v] : Tensor());
    std::vector<Tensor> out;
    try {
      out = s.control ? s.control(node, args, s.subgraphs, values) : (*s.convert)(node, args);
    } catch (const Unsupported&) {
      throw;
    } catch (const DataDependentControlFlow&) {
      throw;
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("node ", 0) == 0) throw;
      throw Error(node.where() + ": " + msg);
    }
    for (size_t i = 0; i < s.outputs.size(); ++i) {
      if (s.outputs[i] < 0) continue;
      if (i >= out.size() || !out[i].defined()) node.unsupported("output ", i, " is not supported");
      values[s.outputs[i]] = out[i];
    }
    for (int v : s.release) values[v] = Tensor();
  }
  std::vector<Tensor> result;
  for (int v : output_slots_) result.push_back(values[v]);
  return result;
}

}  // namespace kiln::runtime

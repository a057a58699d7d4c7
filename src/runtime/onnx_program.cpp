#include "runtime/onnx_program.h"

#include <set>
#include <unordered_map>

namespace kiln::runtime {
namespace {

// Converters follow the signature changes of their ops across these opsets
// (Reduce* axes, Split, Slice, Pad, Clip, Softmax); the ONNX conformance
// suite checks them up to the newest.
constexpr int kMinOpset = 6, kMaxOpset = 28;

TensorInfo info_of(const ::onnx::ValueInfoProto& v, const std::string& where) {
  TensorInfo info;
  info.name = v.name();
  if (!v.type().has_tensor_type())
    throw Unsupported(where + " '" + v.name() + "' is not a tensor (sequences, maps and optionals are not supported)");
  const auto& t = v.type().tensor_type();
  info.dtype = onnx_io::kiln_dtype(t.elem_type(), where + " '" + v.name() + "'");
  info.shape_known = t.has_shape();
  for (const auto& d : t.shape().dim()) {
    info.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    info.dim_names.push_back(d.has_dim_value() ? "" : (d.dim_param().empty() ? "?" : d.dim_param()));
  }
  return info;
}

}  // namespace

OnnxProgram::OnnxProgram(const std::string& bytes, const std::string& what) : what_(what) {
  KILN_CHECK(!bytes.empty(), what, ": the file is empty");
  KILN_CHECK(model_.ParseFromString(bytes), what,
             ": not a valid ONNX model (the protobuf does not parse: a truncated file, or another format)");
  KILN_CHECK(model_.has_graph() && model_.ir_version() > 0, what,
             ": not an ONNX model (no graph or IR version); is it a TensorProto or another protobuf?");
  producer_ = model_.producer_name() + (model_.producer_version().empty() ? "" : " " + model_.producer_version());
  for (const auto& p : model_.metadata_props()) metadata_[p.key()] = p.value();
  std::map<std::string, int> opsets;
  for (const auto& o : model_.opset_import()) opsets[o.domain() == "ai.onnx" ? "" : o.domain()] = static_cast<int>(o.version());
  opset_ = opsets.count("") ? opsets[""] : 0;
  const auto& g = model_.graph();

  // Every node Kiln cannot run, at once.
  std::map<std::string, std::vector<std::string>> missing;  // "domain::Op (opset N)" -> node names
  std::set<std::string> missing_types;
  for (const auto& n : g.node()) {
    std::string domain = n.domain() == "ai.onnx" ? "" : n.domain();
    if (domain.empty() && converters().count(n.op_type())) continue;
    int version = opsets.count(domain) ? opsets[domain] : 0;
    std::string key = (domain.empty() ? "" : domain + "::") + n.op_type() + " (opset " + std::to_string(version) + ")";
    missing[key].push_back(n.name().empty() ? "<unnamed>" : n.name());
    missing_types.insert((domain.empty() ? "" : domain + "::") + n.op_type());
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& [op, nodes] : missing) {
      list += "\n  " + op + ": " + std::to_string(nodes.size()) + " node(s): ";
      for (size_t i = 0; i < nodes.size() && i < 5; ++i) list += (i ? ", " : "") + nodes[i];
      if (nodes.size() > 5) list += ", ...";
    }
    throw Unsupported(detail::concat(what, ": ", missing.size(), " op type(s) are not supported by Kiln:", list,
                                     "\n`kiln ops --onnx` lists the supported ones"),
                      {missing_types.begin(), missing_types.end()});
  }
  KILN_CHECK(opset_ > 0 || g.node_size() == 0, what, ": the model imports no opset of the default ONNX domain");
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    throw Unsupported(detail::concat(what, ": opset ", opset_, " is not supported (Kiln loads opset ", kMinOpset, " to ",
                                     kMaxOpset, "); export with opset_version=17"));

  std::unordered_map<std::string, int> slot;
  auto define = [&](const std::string& name, const std::string& by) {
    KILN_CHECK(!name.empty(), what, ": ", by, " defines a value with an empty name");
    KILN_CHECK(!slot.count(name), what, ": value '", name, "' is defined twice (by ", by, "); the graph is malformed");
    int id = static_cast<int>(constants_.size());
    slot[name] = id;
    constants_.emplace_back();
    return id;
  };
  std::set<std::string> initialized;
  for (const auto& init : g.initializer()) {
    int id = define(init.name(), "an initializer");
    constants_[id] = onnx_io::from_proto(init, what + ": initializer");
    initialized.insert(init.name());
  }
  for (const auto& in : g.input()) {
    if (initialized.count(in.name())) continue;  // an initializer listed as an input (older IR versions)
    inputs_.push_back(info_of(in, what + ": input"));
    input_slots_.push_back(define(in.name(), "a graph input"));
  }
  for (const auto& n : g.node()) {
    Step step{&n, &converters().at(n.op_type()), {}, {}, {}};
    std::string who = "node '" + n.name() + "' (" + n.op_type() + ")";
    for (const auto& name : n.input()) {
      if (name.empty()) {
        step.inputs.push_back(-1);
        continue;
      }
      auto it = slot.find(name);
      KILN_CHECK(it != slot.end(), what, ": ", who, " reads '", name,
                 "', which no earlier node, input or initializer defines (the graph is malformed or not in "
                 "topological order)");
      step.inputs.push_back(it->second);
    }
    for (const auto& name : n.output()) step.outputs.push_back(name.empty() ? -1 : define(name, who));
    steps_.push_back(std::move(step));
  }
  // Graph inputs whose values reach an input read as a value (a shape, axes),
  // through any computation but Shape and Size, which read only shapes.
  std::vector<std::set<int>> depends(constants_.size());
  for (size_t i = 0; i < input_slots_.size(); ++i) depends[input_slots_[i]].insert(static_cast<int>(i));
  bound_by_value_.assign(inputs_.size(), false);
  for (const Step& step : steps_) {
    const std::string& op = step.proto->op_type();
    std::set<int> merged;
    if (op != "Shape" && op != "Size")
      for (int v : step.inputs)
        if (v >= 0) merged.insert(depends[v].begin(), depends[v].end());
    for (int v : step.outputs)
      if (v >= 0) depends[v] = merged;
    for (int pos : value_inputs(op))
      if (pos < static_cast<int>(step.inputs.size()) && step.inputs[pos] >= 0)
        for (int i : depends[step.inputs[pos]]) bound_by_value_[i] = true;
  }
  for (const auto& out : g.output()) {
    auto it = slot.find(out.name());
    KILN_CHECK(it != slot.end(), what, ": graph output '", out.name(), "' is not produced by any node");
    outputs_.push_back(info_of(out, what + ": output"));
    output_slots_.push_back(it->second);
  }
  KILN_CHECK(!outputs_.empty(), what, ": the graph has no outputs");
  // Each intermediate value is dropped after the last step that reads it:
  // run eagerly (and when traced), a model otherwise holds every activation
  // to the end (1.3 GB for a 4-layer encoder at batch 64).
  std::vector<int> last_use(constants_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i)
    for (int v : steps_[i].inputs)
      if (v >= 0) last_use[v] = static_cast<int>(i);
  for (int v : output_slots_) last_use[v] = static_cast<int>(steps_.size());
  for (size_t v = 0; v < last_use.size(); ++v)
    if (last_use[v] >= 0 && last_use[v] < static_cast<int>(steps_.size()) && !constants_[v].defined())
      steps_[last_use[v]].release.push_back(static_cast<int>(v));
}

void OnnxProgram::check_inputs(const std::vector<Tensor>& in) const {
  KILN_CHECK(in.size() == inputs_.size(), "the model takes ", inputs_.size(), " input(s) (", [&] {
    std::string s;
    for (size_t i = 0; i < inputs_.size(); ++i) s += (i ? "; " : "") + inputs_[i].str();
    return s;
  }(), "), got ", in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const TensorInfo& want = inputs_[i];
    KILN_CHECK(in[i].defined(), "input '", want.name, "' is missing; expected ", want.str());
    bool fits = in[i].dtype() == want.dtype;
    if (want.shape_known) {
      fits = fits && in[i].dim() == static_cast<int64_t>(want.shape.size());
      for (size_t d = 0; fits && d < want.shape.size(); ++d) fits = want.shape[d] < 0 || want.shape[d] == in[i].shape()[d];
    }
    KILN_CHECK(fits, "input '", want.name, "' expects ", want.str().substr(want.name.size() + 2), ", got ",
               dtype_name(in[i].dtype()), " ", shape_str(in[i].shape()));
  }
}

std::vector<Tensor> OnnxProgram::run(const std::vector<Tensor>& in) const {
  std::vector<Tensor> values = constants_;
  for (size_t i = 0; i < in.size(); ++i) values[input_slots_[i]] = in[i];
  std::vector<Tensor> args;
  for (const Step& s : steps_) {
    OnnxNode node(*s.proto, opset_);
    args.clear();
    for (int v : s.inputs) args.push_back(v >= 0 ? values[v] : Tensor());
    std::vector<Tensor> out;
    try {
      out = (*s.convert)(node, args);
    } catch (const Unsupported&) {
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

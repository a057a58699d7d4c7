#include "runtime/onnx_program.h"

#include <set>

#include "runtime/onnx_qdq_fusion.h"

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
  find_unsupported(g, opsets, missing, missing_types);
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

  rewrites_ = fuse_qdq(*model_.mutable_graph()).summary();
  graph_ = std::make_unique<OnnxGraph>(g, opset_, what, nullptr);
  for (const auto* in : graph_->input_protos()) inputs_.push_back(info_of(*in, what + ": input"));
  for (const auto& out : g.output()) outputs_.push_back(info_of(out, what + ": output"));
  bound_by_value_ = graph_->inputs_bound_by_value();
}

std::vector<Tensor> OnnxProgram::run(const std::vector<Tensor>& in) const { return graph_->run(in); }

}  // namespace kiln::runtime

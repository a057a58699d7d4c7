// export_model: trace the Cell in inference mode, fold what is constant, and
// write the graph with its weights as an ONNX ModelProto.
#include "io/onnx_export.h"

#include <cstdio>

#include <fstream>
#include <set>

#include "graph/compiled.h"
#include "graph/passes.h"
#include "io/atomic_file.h"
#include "io/onnx_tensor.h"
#include "kiln/autograd.h"
#include "kiln/op_library.h"
#include "kiln/nn.h"
#include "kiln/onnx.h"
#include "nn/captured_cell.h"

namespace kiln {
namespace onnx_io {

std::string ExportContext::unique(const std::string& hint) {
  std::string base = hint.empty() ? "t" : hint;
  int& n = taken[base];
  std::string name = n == 0 ? base : base + "_" + std::to_string(n);
  ++n;
  while (taken.count(name) && name != base) name = base + "_" + std::to_string(n++);
  if (name != base) taken[name] = 1;
  return name;
}

::onnx::NodeProto& ExportContext::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                       const std::vector<std::string>& outputs) {
  auto* n = out.add_node();
  // "com.example::RmsNorm": a type of a package's own domain.
  const size_t sep = op_type.find("::");
  const std::string type = sep == std::string::npos ? op_type : op_type.substr(sep + 2);
  if (sep != std::string::npos) {
    n->set_domain(op_type.substr(0, sep));
    domains.insert(n->domain());
  }
  n->set_op_type(type);
  n->set_name(unique(type));
  // Trailing omitted optional inputs are dropped; inner ones stay as "".
  size_t count = inputs.size();
  while (count > 0 && inputs[count - 1].empty()) --count;
  for (size_t i = 0; i < count; ++i) n->add_input(inputs[i]);
  for (const auto& o : outputs) n->add_output(o);
  return *n;
}

namespace {

void describe(::onnx::ValueInfoProto& info, const std::string& name, const TensorMeta& meta, bool dynamic_batch) {
  info.set_name(name);
  auto* t = info.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx_dtype(meta.dtype));
  auto* shape = t->mutable_shape();
  for (size_t i = 0; i < meta.shape.size(); ++i) {
    auto* d = shape->add_dim();
    if (i == 0 && dynamic_batch)
      d->set_dim_param("batch");
    else
      d->set_dim_value(meta.shape[i]);
  }
}

// Parameter names become initializer names ("layers.0.linear1.weight").
std::string hint_for(const graph::Value& v, int id) {
  if (!v.name.empty()) return v.name;
  return (v.kind == graph::ValueKind::Result ? "t" : "const") + std::to_string(id);
}

// The inference graph of a Cell: traced with set_train(false) and no
// gradients, parameters as constants, cleaned and batch norm folded. No pass
// that makes Kiln-only kernels (fusion, layouts) runs.
graph::Graph inference_graph(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& inputs) {
  bool was_training = cell->training();
  if (was_training)
    std::fprintf(stderr,
                 "kiln: export: %s is in training mode; it is exported in inference mode (no dropout, batch norm with "
                 "its running statistics) and left in training mode (call set_train(false) first to skip this note)\n",
                 cell->type_name().c_str());
  cell->set_train(false);
  graph::Graph g;
  try {
    auto impl = jit::make_impl(nullptr, {}, nn::detail::capture(cell));
    nn::Cell* raw = cell.get();
    auto program = [raw](const std::vector<Tensor>& in) -> std::vector<Tensor> {
      KILN_CHECK(in.size() == 1, "export: a Cell takes one input, got ", in.size());
      NoGradGuard no_grad;
      return {(*raw)(in[0])};
    };
    g = graph::detail::trace(program, inputs, impl->names, nullptr);
  } catch (...) {
    cell->set_train(was_training);
    throw;
  }
  cell->set_train(was_training);
  for (auto& v : g.values)
    if (v.kind == graph::ValueKind::Param) v.kind = graph::ValueKind::Constant;
  for (auto pass : {graph::eliminate_dead_code, graph::eliminate_common_subexpressions, graph::fold_constants,
                    graph::simplify_algebra, graph::fold_batch_norm, graph::eliminate_dead_code})
    pass(g);
  return g;
}

::onnx::ModelProto build_model(const graph::Graph& g, const ExportOptions& options, ExportReport& report) {
  KILN_CHECK(options.opset >= 13 && options.opset <= 17, "export: opset ", options.opset,
             " is not supported; Kiln writes opset 13 to 17 (17 is the default)");
  // Every op without an ONNX form, at once.
  std::map<std::string, int> missing;
  for (const auto& n : g.nodes)
    if (!n.removed && (!n.op || !n.op->onnx)) ++missing[n.name()];
  if (!missing.empty()) {
    std::string list;
    for (auto& [op, count] : missing) list += "\n  " + op + " (" + std::to_string(count) + " nodes)";
    KILN_FAIL("export: ", missing.size(), " op type(s) in the graph have no ONNX form:", list,
              "\nexpress them with ops that have one (the ONNX column of `kiln ops` lists them)");
  }

  ::onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("kiln");
  model.set_producer_version(KILN_VERSION);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  for (const auto& [k, v] : options.metadata) {
    auto* p = model.add_metadata_props();
    p->set_key(k);
    p->set_value(v);
  }
  ::onnx::GraphProto& out = *model.mutable_graph();
  out.set_name(options.graph_name);
  onnx_io::ExportContext ctx{g, out, options.dynamic_batch, options.opset, {}, {}, {}};
  ctx.names.resize(g.values.size());

  auto pick = [](const std::vector<std::string>& names, size_t i, const char* base) {
    if (i < names.size() && !names[i].empty()) return names[i];
    return i == 0 ? std::string(base) : std::string(base) + "_" + std::to_string(i);
  };
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int v = g.inputs[i];
    ctx.names[v] = ctx.unique(pick(options.input_names, i, "input"));
    KILN_CHECK(ctx.names[v] == pick(options.input_names, i, "input"), "export: input name '",
               pick(options.input_names, i, "input"), "' is given twice");
    onnx_io::describe(*out.add_input(), ctx.names[v], g.values[v].meta, options.dynamic_batch);
  }
  // Graph outputs take the requested names; a value returned twice gets an Identity.
  std::vector<std::string> output_names;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    std::string want = pick(options.output_names, i, "output");
    KILN_CHECK(!ctx.taken.count(want), "export: output name '", want, "' is already used by an input or output");
    ctx.taken[want] = 1;
    output_names.push_back(want);
  }
  std::set<int> used;
  for (const auto& n : g.nodes)
    if (!n.removed)
      for (int v : n.inputs)
        if (v >= 0) used.insert(v);
  for (int v : g.outputs) used.insert(v);
  for (size_t id = 0; id < g.values.size(); ++id) {
    const auto& v = g.values[id];
    if (v.kind != graph::ValueKind::Constant || !used.count(static_cast<int>(id))) continue;
    ctx.names[id] = ctx.unique(onnx_io::hint_for(v, static_cast<int>(id)));
    auto* init = out.add_initializer();
    onnx_io::to_proto(v.tensor, *init);
    init->set_name(ctx.names[id]);
    report.weight_bytes += v.tensor.numel() * static_cast<int64_t>(dtype_size(v.tensor.dtype()));
  }
  std::map<int, std::string> direct;  // value -> the output name it is written under
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int v = g.outputs[i];
    if (g.values[v].kind == graph::ValueKind::Result && !direct.count(v)) {
      ctx.names[v] = output_names[i];
      direct[v] = output_names[i];
    }
  }
  for (const auto& n : g.nodes) {
    if (n.removed) continue;
    for (int v : n.outputs)
      if (ctx.names[v].empty()) ctx.names[v] = ctx.unique(onnx_io::hint_for(g.values[v], v));
    onnx_io::export_node(ctx, n);
  }
  for (const std::string& domain : ctx.domains) {
    const int version = onnx_domain_version(domain);
    KILN_CHECK(version > 0, "export: ONNX domain ", domain, " is written by no loaded op package");
    auto* custom = model.add_opset_import();
    custom->set_domain(domain);
    custom->set_version(version);
  }
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    int v = g.outputs[i];
    if (ctx.names[v] != output_names[i]) ctx.node("Identity", {ctx.names[v]}, {output_names[i]});
    onnx_io::describe(*out.add_output(), output_names[i], g.values[v].meta, options.dynamic_batch);
  }
  report.nodes = static_cast<size_t>(out.node_size());
  report.initializers = static_cast<size_t>(out.initializer_size());
  for (const auto& n : out.node()) ++report.op_counts[n.op_type()];
  return model;
}

}  // namespace
}  // namespace onnx_io

std::string ExportReport::str() const {
  std::string s = std::to_string(nodes) + " nodes, " + std::to_string(initializers) + " initializers (" +
                  std::to_string(weight_bytes / 1024) + " KiB of weights):";
  for (const auto& [op, n] : op_counts) s += " " + op + " x" + std::to_string(n);
  return s;
}

std::string export_model_bytes(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& sample_inputs,
                               const ExportOptions& options, ExportReport* report) {
  KILN_CHECK(cell != nullptr, "export: the Cell is null");
  KILN_CHECK(!sample_inputs.empty(), "export: give a sample input (its shape and dtype are those of the graph)");
  ExportReport local;
  graph::Graph g = onnx_io::inference_graph(cell, sample_inputs);
  ::onnx::ModelProto model = onnx_io::build_model(g, options, report ? *report : local);
  std::string bytes;
  KILN_CHECK(model.SerializeToString(&bytes), "export: the model could not be serialized (over 2 GB?)");
  return bytes;
}

ExportReport export_model(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& sample_inputs,
                          const std::string& path, const ExportOptions& options) {
  ExportReport report;
  std::string bytes = export_model_bytes(std::move(cell), sample_inputs, options, &report);
  io::write_file_atomic(path, {{bytes.data(), bytes.size()}});
  return report;
}

Tensor load_tensor_pb(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  ::onnx::TensorProto proto;
  KILN_CHECK(proto.ParseFromIstream(&f), "'", path, "' is not a serialized ONNX TensorProto (truncated or another format)");
  return onnx_io::from_proto(proto, "'" + path + "'");
}

void save_tensor_pb(const std::string& path, const Tensor& t, const std::string& name) {
  ::onnx::TensorProto proto;
  onnx_io::to_proto(t, proto);
  if (!name.empty()) proto.set_name(name);
  std::string bytes = proto.SerializeAsString();
  io::write_file_atomic(path, {{bytes.data(), bytes.size()}});
}

}  // namespace kiln

// kiln::OnnxWriter over the exporter's context: what an op's ONNX writer
// sees of its graph node, and how its ONNX nodes and initializers are added.
#include <algorithm>
#include <type_traits>

#include "io/onnx_export.h"
#include "io/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx_io {

void set_attrs(::onnx::NodeProto& n, const Attrs& attrs) {
  for (const auto& [name, value] : attrs.items()) {
    auto* a = n.add_attribute();
    a->set_name(name);
    std::visit(
        [a](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, bool>) {
            a->set_type(::onnx::AttributeProto::INT);
            a->set_i(static_cast<int64_t>(v));
          } else if constexpr (std::is_same_v<T, double>) {
            a->set_type(::onnx::AttributeProto::FLOAT);
            a->set_f(static_cast<float>(v));
          } else if constexpr (std::is_same_v<T, std::string>) {
            a->set_type(::onnx::AttributeProto::STRING);
            a->set_s(v);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            a->set_type(::onnx::AttributeProto::INTS);
            for (int64_t x : v) a->add_ints(x);
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            a->set_type(::onnx::AttributeProto::FLOATS);
            for (double x : v) a->add_floats(static_cast<float>(x));
          } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            a->set_type(::onnx::AttributeProto::STRINGS);
            for (const std::string& x : v) a->add_strings(x);
          } else {
            static_assert(std::is_same_v<T, DType>);
            a->set_type(::onnx::AttributeProto::INT);
            a->set_i(onnx_dtype(v));
          }
        },
        value);
  }
}

namespace {

class NodeWriter final : public OnnxWriter {
 public:
  NodeWriter(ExportContext& ctx, const graph::Node& n) : ctx_(ctx), n_(n) {}

  const Attrs& attrs() const override { return n_.attrs; }
  size_t num_inputs() const override { return n_.inputs.size(); }
  std::string in(size_t i) const override {
    return i < n_.inputs.size() && n_.inputs[i] >= 0 ? ctx_.name(n_.inputs[i]) : "";
  }
  const TensorMeta& in_meta(size_t i) const override {
    KILN_CHECK(i < n_.inputs.size() && n_.inputs[i] >= 0, "export: ", where(), " has no input ", i);
    return ctx_.g.values.at(n_.inputs[i]).meta;
  }
  size_t num_outputs() const override { return n_.outputs.size(); }
  const std::string& out(size_t i) const override { return ctx_.name(n_.outputs.at(i)); }
  const TensorMeta& out_meta(size_t i) const override { return ctx_.g.values.at(n_.outputs.at(i)).meta; }
  bool output_used(size_t i) const override {
    int v = n_.outputs.at(i);
    for (const graph::Node& m : ctx_.g.nodes)
      if (!m.removed && std::find(m.inputs.begin(), m.inputs.end(), v) != m.inputs.end()) return true;
    return std::find(ctx_.g.outputs.begin(), ctx_.g.outputs.end(), v) != ctx_.g.outputs.end();
  }
  bool dynamic_batch() const override { return ctx_.dynamic_batch; }
  int opset() const override { return ctx_.opset; }
  std::string where() const override {
    return n_.outputs.empty() ? "'" + n_.op->name + "'" : "'" + n_.op->name + "' (output '" + out(0) + "')";
  }

  void node(const std::string& op_type, const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
            const Attrs& attrs) override {
    // The op table shows these types as the op's ONNX form, so a writer that
    // emits another one is a bug in its definition.
    const auto& types = n_.op->onnx.types;
    KILN_CHECK(std::find(types.begin(), types.end(), op_type) != types.end(), "export: the ONNX writer of op '",
               n_.op->name, "' emits ", op_type, ", which its definition does not list in onnx.types; add it there");
    set_attrs(ctx_.node(op_type, inputs, outputs), attrs);
  }
  std::string unique(const std::string& hint) override { return ctx_.unique(hint); }
  std::string initializer(const Tensor& value, const std::string& hint) override {
    auto* init = ctx_.out.add_initializer();
    to_proto(value, *init);
    init->set_name(ctx_.unique(hint));
    return init->name();
  }

 private:
  ExportContext& ctx_;
  const graph::Node& n_;
};

}  // namespace

void export_node(ExportContext& ctx, const graph::Node& n) {
  KILN_ASSERT(n.op && n.op->onnx, "export_node on a node without an ONNX writer");
  NodeWriter w(ctx, n);
  n.op->onnx.write(w);
}

}  // namespace kiln::onnx_io

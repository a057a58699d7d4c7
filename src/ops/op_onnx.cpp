#include "kiln/op_onnx.h"

#include "kiln/registry.h"

namespace kiln {

DType OnnxWriter::dtype() const { return in_meta(0).dtype; }
const Shape& OnnxWriter::in_shape(size_t i) const { return in_meta(i).shape; }
const Shape& OnnxWriter::out_shape(size_t i) const { return out_meta(i).shape; }

std::vector<std::string> OnnxWriter::inputs() const {
  std::vector<std::string> v;
  for (size_t i = 0; i < num_inputs(); ++i) v.push_back(in(i));
  return v;
}

std::vector<std::string> OnnxWriter::outputs() const {
  std::vector<std::string> v;
  for (size_t i = 0; i < num_outputs(); ++i) v.push_back(out(i));
  return v;
}

std::string OnnxWriter::ints(const std::vector<int64_t>& values, const std::string& hint) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::Int64);
  std::copy(values.begin(), values.end(), t.data<int64_t>());
  return initializer(t, hint);
}

std::string OnnxWriter::scalar(double value, DType dtype, const std::string& hint) {
  return initializer(full({}, value, dtype), hint);
}

std::string OnnxWriter::filled(const Shape& shape, double value, DType dtype, const std::string& hint) {
  return initializer(full(shape, value, dtype), hint);
}

std::string OnnxWriter::in_or_filled(size_t i, const Shape& shape, double value, const std::string& hint) {
  return in(i).empty() ? filled(shape, value, dtype(), hint) : in(i);
}

void OnnxWriter::require_unused_from(size_t from, const char* what) const {
  for (size_t i = from; i < num_outputs(); ++i)
    KILN_CHECK(!output_used(i), "export: the graph uses ", what, " of ", where(),
               ", which ONNX does not provide; export the model in inference mode (set_train(false))");
}

OnnxExport onnx_as(const std::string& op_type) {
  return {{op_type}, [op_type](OnnxWriter& w) { w.node(op_type, w.inputs(), w.outputs()); }};
}

OnnxExport onnx_as(const std::string& op_type, std::function<Attrs(const OnnxWriter&)> attrs) {
  return {{op_type}, [op_type, attrs = std::move(attrs)](OnnxWriter& w) {
            w.node(op_type, w.inputs(), w.outputs(), attrs(w));
          }};
}

}  // namespace kiln

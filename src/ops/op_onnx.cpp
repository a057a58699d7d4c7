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

const Tensor& OnnxReader::input(const std::vector<Tensor>& in, size_t i) const {
  if (i >= in.size() || !in[i].defined()) fail("input ", i, " is required but missing");
  return in[i];
}

int64_t OnnxReader::axis(int64_t axis, int64_t rank) const {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail("axis ", axis, " is out of range for rank ", rank);
  return a;
}

Tensor onnx_legacy_broadcast(const OnnxReader& n, const Tensor& a, const Tensor& b) {
  if (n.opset() >= 7 || !n.i("broadcast", 0) || !n.has("axis") || b.dim() == 0) return b;
  const int64_t axis = n.axis(n.i("axis", 0), a.dim());
  if (axis + b.dim() > a.dim()) n.fail("B ", shape_str(b.shape()), " does not fit A ", shape_str(a.shape()), " at axis ", axis);
  Shape s = b.shape();
  s.resize(static_cast<size_t>(a.dim() - axis), 1);
  return b.reshape(s);
}

}  // namespace kiln

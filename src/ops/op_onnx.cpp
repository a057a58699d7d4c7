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

int64_t OnnxReader::required_i(const std::string& name) const {
  if (!has(name)) fail("the required attribute '", name, "' is missing");
  return i(name, 0);
}

std::vector<int64_t> OnnxReader::axes_input(const std::vector<Tensor>& in, size_t index, int since) const {
  if (opset() < since) return ints("axes");
  if (index < in.size() && in[index].defined()) return int_values(in[index], "axes");
  return {};
}

std::vector<int64_t> OnnxReader::int_values(const Tensor& t, const char* what) const {
  if (!t.defined()) fail("the ", what, " input is missing");
  if (is_floating(t.dtype())) fail("the ", what, " input should hold integers, not ", dtype_name(t.dtype()));
  return t.to(DType::Int64).contiguous().to_vector<int64_t>();
}

double OnnxReader::scalar_value(const Tensor& t, const char* what) const {
  if (!t.defined()) fail("the ", what, " input is missing");
  if (t.numel() != 1) fail("the ", what, " input should hold one value, it has shape ", shape_str(t.shape()));
  return t.to(DType::Float64).contiguous().to_vector<double>()[0];
}

void OnnxReader::check_created_size(const Shape& shape) const {
  constexpr int64_t kMax = int64_t{1} << 28;  // 1 GiB of float32
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail("shape ", shape_str(shape), " has a negative size");
    if (d > 0 && numel > kMax / d) fail("the result ", shape_str(shape), " would hold more than 2^28 elements");
    numel *= d;
  }
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

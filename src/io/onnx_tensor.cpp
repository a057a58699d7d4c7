#include "io/onnx_tensor.h"

#include <cstring>

namespace kiln::onnx_io {

using onnx::TensorProto;

int onnx_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return TensorProto::FLOAT;
    case DType::Float64: return TensorProto::DOUBLE;
    case DType::Float16: return TensorProto::FLOAT16;
    case DType::BFloat16: return TensorProto::BFLOAT16;
    case DType::Int32: return TensorProto::INT32;
    case DType::Int64: return TensorProto::INT64;
    case DType::UInt8: return TensorProto::UINT8;
    case DType::Bool: return TensorProto::BOOL;
    case DType::Int8: return TensorProto::INT8;
  }
  KILN_FAIL("onnx: no ONNX type for dtype ", dtype_name(dtype));
}

const char* onnx_dtype_name(int t) {
  if (TensorProto::DataType_IsValid(t)) {
    static thread_local std::string name;
    name = TensorProto::DataType_Name(static_cast<TensorProto::DataType>(t));
    return name.c_str();
  }
  return "invalid";
}

DType kiln_dtype(int t, const std::string& where) {
  switch (t) {
    case TensorProto::FLOAT: return DType::Float32;
    case TensorProto::DOUBLE: return DType::Float64;
    case TensorProto::FLOAT16: return DType::Float16;
    case TensorProto::BFLOAT16: return DType::BFloat16;
    case TensorProto::INT32: return DType::Int32;
    case TensorProto::INT64: return DType::Int64;
    case TensorProto::UINT8: return DType::UInt8;
    case TensorProto::BOOL: return DType::Bool;
    case TensorProto::INT8: return DType::Int8;
    default: break;
  }
  if (t <= TensorProto::UNDEFINED || t > 64)
    KILN_FAIL(where, ": element type ", t, " is not an ONNX data type; the file is malformed");
  if (!TensorProto::DataType_IsValid(t))  // the 8-, 4- and 2-bit types of newer ONNX versions
    throw Unsupported(detail::concat(where, ": element type ", t,
                                     " (a low-precision type of a newer ONNX version) is not supported by Kiln"));
  throw Unsupported(detail::concat(where, ": element type ", onnx_dtype_name(t),
                                   " is not supported by Kiln (float32, float64, float16, bfloat16, int32, int64, "
                                   "uint8, int8 and bool are); cast it in the exporting framework"));
}

namespace {
template <typename Src, typename Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& field, Tensor& t) {
  Dst* out = static_cast<Dst*>(t.raw_data());
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}
}  // namespace

Tensor from_proto(const TensorProto& p, const std::string& where) {
  std::string name = where + (p.name().empty() ? "" : " '" + p.name() + "'");
  KILN_CHECK(p.data_location() != TensorProto::EXTERNAL,
             name, ": the data is stored in an external file, which Kiln does not load; save the model with its "
             "weights inside (onnx.save(model, path, save_as_external_data=False))");
  DType dtype = kiln_dtype(p.data_type(), name);
  Shape shape;
  for (int64_t d : p.dims()) {
    KILN_CHECK(d >= 0, name, ": dimension ", d, " is not valid");
    shape.push_back(d);
  }
  int64_t numel = checked_numel(shape, int64_t{1} << 40);
  KILN_CHECK(numel >= 0, name, ": shape ", shape_str(shape), " is too large (over 2^40 elements); the file is malformed");
  // Sizes are checked against the data present before anything is allocated.
  size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  if (p.has_raw_data()) {
    KILN_CHECK(p.raw_data().size() == bytes, name, ": raw_data holds ", p.raw_data().size(), " bytes but shape ",
               shape_str(shape), " of ", dtype_name(dtype), " needs ", bytes, "; the file is truncated or malformed");
    Tensor t = Tensor::empty(shape, dtype);
    if (bytes) std::memcpy(t.raw_data(), p.raw_data().data(), bytes);
    return t;
  }
  int present = 0;
  switch (dtype) {
    case DType::Float32: present = p.float_data_size(); break;
    case DType::Float64: present = p.double_data_size(); break;
    case DType::Int64: present = p.int64_data_size(); break;
    default: present = p.int32_data_size(); break;
  }
  KILN_CHECK(present == numel, name, ": holds ", present, " values but shape ", shape_str(shape), " needs ", numel,
             "; the file is truncated or malformed");
  Tensor t = Tensor::empty(shape, dtype);
  switch (dtype) {
    case DType::Float32: copy_field<float, float>(p.float_data(), t); break;
    case DType::Float64: copy_field<double, double>(p.double_data(), t); break;
    case DType::Int64: copy_field<int64_t, int64_t>(p.int64_data(), t); break;
    case DType::Int32: copy_field<int32_t, int32_t>(p.int32_data(), t); break;
    case DType::UInt8: copy_field<int32_t, uint8_t>(p.int32_data(), t); break;
    case DType::Bool: copy_field<int32_t, bool>(p.int32_data(), t); break;
    case DType::Int8: copy_field<int32_t, int8_t>(p.int32_data(), t); break;
    case DType::Float16:
    case DType::BFloat16: copy_field<int32_t, uint16_t>(p.int32_data(), t); break;
  }
  return t;
}

void to_proto(const Tensor& t, TensorProto& p) {
  p.set_data_type(onnx_dtype(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  Tensor c = t.to(cpu_device()).contiguous();
  p.set_raw_data(std::string(static_cast<const char*>(c.raw_data()), c.numel() * dtype_size(c.dtype())));
}

}  // namespace kiln::onnx_io

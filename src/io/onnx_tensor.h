#pragma once
// Conversions between Kiln tensors and ONNX TensorProto / data types.
#include <onnx/onnx_pb.h>

#include <optional>
#include <string>

#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::onnx_io {

// Raised for valid ONNX that Kiln cannot run.
using Unsupported = UnsupportedError;

// The ONNX element type of a Kiln dtype.
int onnx_dtype(DType dtype);
// The Kiln dtype of an ONNX element type; throws Unsupported for those Kiln lacks.
DType kiln_dtype(int onnx_type, const std::string& where);
const char* onnx_dtype_name(int onnx_type);

// Reads a TensorProto (raw_data or the typed fields), checking that the data
// matches the declared shape. External data is refused.
Tensor from_proto(const onnx::TensorProto& proto, const std::string& where);
// Writes `t` as raw little-endian data.
void to_proto(const Tensor& t, onnx::TensorProto& proto);

}  // namespace kiln::onnx_io

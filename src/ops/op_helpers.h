#pragma once
// Shared pieces of op definitions: common infer functions and short names.
#include <string>
#include <vector>

#include "kiln/caller_language.h"
#include "kiln/functional.h"
#include "kiln/registry.h"
#include "ops/shape_rules.h"

namespace kiln::detail {

using Grads = std::vector<Tensor>;
using Metas = std::vector<TensorMeta>;

// An OpDef with the common fields set; ops without a gradient rule get the
// nondifferentiable tag.
OpDef make_op(const char* name, std::vector<std::string> inputs, std::vector<std::string> attrs, InferFn infer,
              GradFn grad, OnnxExport onnx, uint32_t tags = 0, std::vector<std::string> outputs = {"y"});

// Sets d's ONNX reader for `type`: the node's inputs into d as they are, no
// attributes (binary ops also take opset 6's broadcast=1 with an axis).
OpDef read_onnx_as(OpDef d, const std::string& type);
// Sets d's ONNX reader.
inline OpDef reads_onnx(OpDef d, OnnxImport import) {
  d.onnx_import = std::move(import);
  return d;
}
// Sets d's MindSpore reader for these primitives: the node's inputs into d
// as they are (primitives whose attributes do not change what d computes).
OpDef read_mindspore_as(OpDef d, std::vector<std::string> primitives);
// Sets d's MindSpore reader.
inline OpDef reads_mindspore(OpDef d, OnnxImport import) {
  d.mindspore_import = std::move(import);
  return d;
}
// Sets the precision d computes in under autocast.
inline OpDef autocast_as(OpDef d, Autocast rule) {
  d.autocast = rule;
  return d;
}

// MindSpore's attribute forms. A spatial attribute (kernel_size, stride,
// dilation) given as one value, as (h, w) or as (1, 1, h, w): (h, w).
std::vector<int64_t> mindspore_hw(const OnnxReader& n, const std::string& name, int64_t fallback);
// pad_mode as "pad", "same" or "valid", from any case or MindSpore's enum (0, 1, 2).
std::string mindspore_pad_mode(const OnnxReader& n, const std::string& fallback);
// Padding (top, bottom, left, right) that "same" gives: the output is
// ceil(input / stride), the odd pixel at the bottom and right.
std::vector<int64_t> same_padding(const Shape& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                                  const std::vector<int64_t>& dilation);
// The format attribute ("NCHW", "NHWC", ...; NCHW when absent), from a string or MindSpore's enum.
std::string mindspore_data_format(const OnnxReader& n);
// The only data format Kiln's readers take: NCHW (MindSpore's default).
void require_nchw(const OnnxReader& n);

inline std::vector<TensorMeta> same_as_input(const Metas& in, const Attrs&) { return {in[0]}; }

inline void check_same_dtype(const Metas& in, size_t a, size_t b) {
  KILN_CHECK(in[a].dtype == in[b].dtype, "inputs ", a, " and ", b, " have different dtypes (",
             dtype_name(in[a].dtype), " and ", dtype_name(in[b].dtype),
             "); this op does not promote: cast one to the other's dtype, e.g. ",
             in_caller_language("x.to(weight.dtype())", "x.astype(weight.dtype)"), " (layers hold float32 parameters)");
}

inline void check_floating(const TensorMeta& m, const char* what) {
  KILN_CHECK(is_floating(m.dtype), what, " must be a floating-point tensor, got ", dtype_name(m.dtype),
             "; convert it with ", in_caller_language(".to(kiln::DType::Float32)", ".astype(kiln.float32)"));
}

inline void check_rank(const TensorMeta& m, int64_t rank, const char* what, const char* layout) {
  KILN_CHECK(static_cast<int64_t>(m.shape.size()) == rank, what, " must have rank ", rank, " (", layout,
             "), got shape ", shape_str(m.shape));
}

// Grad helper: reshapes a reduced gradient so it broadcasts against the input.
Tensor unreduce(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& axes, bool keepdim);

// The output of the scatter ops (x, index, src; axis): x's, after checking
// that index fits src and x off the axis.
std::vector<TensorMeta> infer_scatter(const Metas& in, const Attrs& a);

// The scatter ops' src as ONNX ScatterElements' updates, which have the
// index's shape: cut to it with a Slice where src is larger.
std::string updates_like_index(OnnxWriter& w);

}  // namespace kiln::detail

// Looks an op up once per call site.
#define KILN_OP(NAME)                                                  \
  ([]() -> const ::kiln::OpDef& {                                      \
    static const ::kiln::OpDef& op = ::kiln::OpRegistry::instance().get(NAME); \
    return op;                                                         \
  }())

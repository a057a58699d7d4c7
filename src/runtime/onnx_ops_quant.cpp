// ONNX quantization and a few creation and pooling ops, as compositions of
// Kiln ops: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on
// uint8 (and int32 for dequantizing), per tensor or per axis; EyeLike;
// LpPool.
#include <cmath>

#include "kiln/functional.h"
#include "ops/onnx_spatial.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

// A per-axis scale or zero point shaped to broadcast along `axis` of x.
Tensor along_axis(const OnnxNode& n, const Tensor& t, const Tensor& x) {
  if (n.i("block_size", 0) != 0) n.unsupported("blocked quantization (block_size) is not supported");
  if (t.numel() == 1) return t.reshape({});
  if (t.dim() != 1) n.fail("scales and zero points must be scalars or 1-d, got ", shape_str(t.shape()));
  const int64_t axis = normalize_axis(n, n.i("axis", 1), x.dim());
  if (t.shape()[0] != x.shape()[axis])
    n.fail("the ", t.shape()[0], " scales do not match axis ", axis, " of size ", x.shape()[axis]);
  Shape s(static_cast<size_t>(x.dim()), 1);
  s[axis] = t.shape()[0];
  return t.reshape(s);
}

void check_quantized(const OnnxNode& n, DType t, bool int32_too) {
  if (t != DType::UInt8 && !(int32_too && t == DType::Int32))
    n.unsupported("quantized type ", dtype_name(t), " is not supported (uint8", int32_too ? " and int32 are)" : " is)");
}

// y = (x - zero_point) * scale, in the scale's dtype.
std::vector<Tensor> dequantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &scale = input(n, in, 1);
  check_quantized(n, x.dtype(), true);
  Tensor centered = cast(x, scale.dtype());
  if (in.size() > 2 && in[2].defined()) centered = centered - cast(along_axis(n, in[2], x), scale.dtype());
  return {centered * along_axis(n, scale, x)};
}

// Rounded half to even, shifted by the zero point and saturated to uint8.
Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point) {
  const Tensor q = round(x / scale) + cast(zero_point, x.dtype());
  return cast(clamp(q, 0.0, 255.0), DType::UInt8);
}

std::vector<Tensor> quantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &scale = input(n, in, 1);
  const Tensor zero = in.size() > 2 && in[2].defined() ? in[2] : zeros({}, DType::UInt8);
  check_quantized(n, zero.dtype(), false);
  if (n.has("output_dtype") && n.i("output_dtype", 2) != 2) n.unsupported("only uint8 outputs are supported");
  const Tensor wide = cast(x, DType::Float32);
  return {quantize(wide, cast(along_axis(n, scale, x), DType::Float32), along_axis(n, zero, x))};
}

// The scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255].
std::vector<Tensor> dynamic_quantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor x = cast(input(n, in, 0), DType::Float32);
  std::vector<int64_t> all;
  for (int64_t d = 0; d < x.dim(); ++d) all.push_back(d);
  const Tensor zero = zeros({}, DType::Float32);
  const Tensor lo = minimum(amin(x, all, false), zero), hi = maximum(amax(x, all, false), zero);
  const Tensor scale = (hi - lo) / scalar_tensor(255.0);
  const Tensor zero_point = cast(clamp(round(neg(lo) / scale), 0.0, 255.0), DType::UInt8);
  return {quantize(x, scale, zero_point), scale, zero_point};
}

// Ones on the k-th diagonal of a matrix shaped like x, in `dtype` or x's.
std::vector<Tensor> eye_like(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (x.dim() != 2) n.fail("input must be 2-d, got ", shape_str(x.shape()));
  const DType dtype = n.has("dtype") ? n.dtype("dtype") : x.dtype();
  const int64_t rows = x.shape()[0], cols = x.shape()[1], k = n.i("k", 0);
  const Tensor i = arange(rows, DType::Int64).reshape({rows, 1}), j = arange(cols, DType::Int64).reshape({1, cols});
  return {cast(eq(j - i, scalar_tensor(static_cast<double>(k), DType::Int64)), dtype)};
}

// (sum over the window of |x|^p)^(1/p): a window average over the zero-padded
// input, times the window size; with dilations or three spatial axes, the
// window sums themselves.
std::vector<Tensor> lp_pool(const OnnxNode& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  const Tensor& x = input(n, in, 0);
  const double p = static_cast<double>(n.i("p", 2));
  const Tensor powered = pow(abs(x), scalar_like(p, x));
  if (x.dim() == 5 || n.has("dilations")) {
    const size_t dims = static_cast<size_t>(x.dim() - 2);
    const auto kernel = n.ints("kernel_shape");
    if (kernel.size() != dims) n.fail("kernel_shape has ", kernel.size(), " values; ", dims, " expected");
    const auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
    Pads pads = resolve_pads(n, x.shape(), kernel, stride, dilation);
    add_ceil_padding(n, x.shape(), kernel, stride, dilation, pads);
    return {pow(window_sums(pad_spatial(powered, pads, 0.0), kernel, stride, dilation), scalar_like(1.0 / p, x))};
  }
  const PoolGeometry g = pool_geometry(n, x);
  int64_t window = 1;
  for (int64_t k : g.kernel) window *= k;
  const Tensor sums = avg_pool2d(g.rank.lift(pad_spatial(powered, g.pads, 0.0)), g.rank.lift(g.kernel, 1),
                                 g.rank.lift(g.stride, 1), {0, 0}, true) *
                      scalar_like(static_cast<double>(window), x);
  return {g.rank.lower(pow(sums, scalar_like(1.0 / p, x)))};
}

}  // namespace

void add_quant_converters(ConverterTable& t) {
  t["DequantizeLinear"] = dequantize_linear;
  t["QuantizeLinear"] = quantize_linear;
  t["DynamicQuantizeLinear"] = dynamic_quantize_linear;
  t["EyeLike"] = eye_like;
  t["LpPool"] = lp_pool;
}

}  // namespace kiln::runtime

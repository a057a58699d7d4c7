// ONNX quantization and a few creation and pooling ops, as compositions of
// Kiln ops: QuantizeLinear and DequantizeLinear on uint8 and int8 (and int32
// for dequantizing), per tensor or per axis; DynamicQuantizeLinear;
// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv (on the integer
// kernels where the weights are symmetric int8) and ONNX Runtime's QGemm,
// QLinearAdd, QLinearConcat, QLinearAveragePool, QLinearGlobalAveragePool,
// QLinearSigmoid, QLinearLeakyRelu, QLinearMul, MatMulIntegerToFloat and
// DynamicQuantizeMatMul; MatMulNBits (block-quantized LLM weights, on matmul_nbits);
// EyeLike; LpPool.
#include <cmath>

#include "core/read_observer.h"
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

// The values a quantized type holds.
std::pair<double, double> quantized_range(DType t) {
  return t == DType::Int8 ? std::pair{-128.0, 127.0} : std::pair{0.0, 255.0};
}

void check_quantized(const OnnxNode& n, DType t, bool int32_too) {
  if (t != DType::UInt8 && t != DType::Int8 && !(int32_too && t == DType::Int32))
    n.unsupported("quantized type ", dtype_name(t), " is not supported (uint8, int8", int32_too ? " and int32 are)" : " are)");
}

// y = (x - zero_point) * scale, in the scale's dtype.
std::vector<Tensor> dequantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &scale = input(n, in, 1);
  check_quantized(n, x.dtype(), true);
  const bool has_zero = in.size() > 2 && in[2].defined();
  if ((x.dtype() == DType::UInt8 || x.dtype() == DType::Int8) && scale.dtype() == DType::Float32 &&
      scale.numel() == 1 && n.i("block_size", 0) == 0 && (!has_zero || (in[2].numel() == 1 && in[2].dtype() == x.dtype())))
    return {kiln::dequantize_linear(x, scale.reshape({}), has_zero ? in[2].reshape({}) : zeros({}, x.dtype()))};
  Tensor centered = cast(x, scale.dtype());
  if (in.size() > 2 && in[2].defined()) centered = centered - cast(along_axis(n, in[2], x), scale.dtype());
  return {centered * along_axis(n, scale, x)};
}

// Rounded half to even, shifted by the zero point and saturated to the
// zero point's type.
Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point) {
  const Tensor q = round(x / scale) + cast(zero_point, x.dtype());
  const auto [lo, hi] = quantized_range(zero_point.dtype());
  return cast(clamp(q, lo, hi), zero_point.dtype());
}

std::vector<Tensor> quantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &x = input(n, in, 0), &scale = input(n, in, 1);
  const bool has_zero = in.size() > 2 && in[2].defined();
  DType out = has_zero ? in[2].dtype() : DType::UInt8;
  if (n.has("output_dtype") && n.i("output_dtype", 0) != 0) {
    const DType asked = n.dtype("output_dtype");
    if (has_zero && asked != out)
      n.fail("output_dtype ", dtype_name(asked), " differs from the zero point's type ", dtype_name(out));
    out = asked;
  }
  check_quantized(n, out, false);
  const Tensor zero = has_zero ? in[2] : zeros({}, out);
  if (x.dtype() == DType::Float32 && scale.dtype() == DType::Float32 && scale.numel() == 1 && zero.numel() == 1 &&
      n.i("block_size", 0) == 0)
    return {kiln::quantize_linear(x, scale.reshape({}), zero.reshape({}))};
  const Tensor wide = cast(x, DType::Float32);
  return {quantize(wide, cast(along_axis(n, scale, x), DType::Float32), along_axis(n, zero, x))};
}

// Integer ops compute in float64, where products and sums of 8-bit values
// stay exact integers, as in the int32 accumulators of the ONNX definitions.
// A per-row (a) or per-output-channel (a weight) zero point or scale is
// shaped to broadcast along axis `axis` of a tensor of rank `rank`.
Tensor per_axis(const Tensor& t, int64_t axis, int64_t rank) {
  if (t.dim() != 1 || t.numel() == 1) return t.numel() == 1 ? t.reshape({}) : t;
  Shape s(static_cast<size_t>(rank), 1);
  s[axis] = t.numel();
  return t.reshape(s);
}

Tensor centered(const OnnxNode& n, const Tensor& x, const Tensor& zero_point) {
  check_quantized(n, x.dtype(), false);
  Tensor wide = cast(x, DType::Float64);
  if (!zero_point.defined()) return wide;
  if (zero_point.dtype() != x.dtype())
    n.fail("the zero point is ", dtype_name(zero_point.dtype()), " but its tensor is ", dtype_name(x.dtype()));
  return wide - cast(zero_point, DType::Float64);
}

// A zero point or scale of a matrix product's left operand, per row when it
// has one value per row.
Tensor per_row(const Tensor& t, const Tensor& a) {
  return t.defined() && a.dim() >= 2 ? per_axis(t, a.dim() - 2, a.dim()) : t;
}

// The convolution of the centered operands (with an int32 bias, in the
// accumulator's scale), read through Conv's own reader with this node's
// geometry attributes.
Tensor conv_of_centered(const OnnxNode& n, const Tensor& x, const Tensor& x_zero, const Tensor& w, const Tensor& w_zero,
                        const Tensor& bias) {
  if (x_zero.defined() && x_zero.numel() != 1) n.fail("the input's zero point must be one value");
  const Tensor wc = centered(n, w, w_zero.defined() ? per_axis(w_zero, 0, w.dim()) : w_zero);
  std::vector<Tensor> args{centered(n, x, x_zero.defined() ? x_zero.reshape({}) : x_zero), wc};
  if (bias.defined()) args.push_back(cast(bias, DType::Float64));
  return converters().at("Conv")(n, args).at(0);
}

// acc * multiplier, rounded half to even, shifted and saturated to the
// output zero point's type; the multiplier is taken in the scales' dtype, as
// the ONNX reference computes it.
Tensor requantize(const OnnxNode& n, const Tensor& acc, const Tensor& multiplier, const Tensor& y_zero) {
  check_quantized(n, y_zero.dtype(), false);
  if (y_zero.numel() != 1) n.fail("the output zero point must be one value");
  const Tensor q = round(acc * cast(multiplier, DType::Float64)) + cast(y_zero.reshape({}), DType::Float64);
  const auto [lo, hi] = quantized_range(y_zero.dtype());
  return cast(clamp(q, lo, hi), y_zero.dtype());
}

// MatMulInteger: (a - a_zero_point) @ (b - b_zero_point) in int32.
std::vector<Tensor> matmul_integer(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &a = input(n, in, 0), &b = input(n, in, 1);
  const Tensor product = matmul(centered(n, a, per_row(OnnxReader::optional(in, 2), a)), centered(n, b, OnnxReader::optional(in, 3)));
  return {cast(product, DType::Int32)};
}

// ConvInteger: the convolution of (x - x_zero_point) and (w - w_zero_point) in int32.
std::vector<Tensor> conv_integer(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor acc = conv_of_centered(n, input(n, in, 0), OnnxReader::optional(in, 2), input(n, in, 1), OnnxReader::optional(in, 3), {});
  return {cast(acc, DType::Int32)};
}

// Whether a node's weights are symmetric int8 (zero points absent or 0, and
// fixed: a model input's may change), which the integer kernels take; others
// compute in float64.
bool symmetric_int8(const Tensor& w, const Tensor& w_zero) {
  if (w.dtype() != DType::Int8) return false;
  if (!w_zero.defined()) return true;
  if (w_zero.dtype() != DType::Int8 || kiln::detail::values_vary(w_zero)) return false;
  for (int8_t v : w_zero.contiguous().to_vector<int8_t>())
    if (v != 0) return false;
  return true;
}

bool one_value(const Tensor& t) { return t.defined() && t.numel() == 1; }
bool float32_scales(std::initializer_list<Tensor> scales) {
  for (const Tensor& s : scales)
    if (s.dtype() != DType::Float32) return false;
  return true;
}

// QLinearMatMul: the int32 product of the centered operands, requantized with
// a_scale * b_scale / y_scale.
std::vector<Tensor> qlinear_matmul(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &a = input(n, in, 0), &b = input(n, in, 3);
  if (a.dim() >= 2 && b.dim() == 2 && symmetric_int8(b, input(n, in, 5)) && one_value(in[1]) && one_value(in[2]) &&
      one_value(in[6]) && one_value(in[7]) && float32_scales({in[1], in[4], in[6]}) &&
      (in[4].numel() == 1 || in[4].numel() == b.shape()[1]))
    return {qlinear_matmul(a, in[1], in[2].reshape({}), b, in[4].reshape({in[4].numel()}), in[6], in[7].reshape({}))};
  // Two computed operands (attention's products), or weights with a zero
  // point, one scale and zero point each: the integer kernels, batch by
  // batch over the broadcast batch shape (a's rows as one batch for weights).
  const Tensor b_zero = OnnxReader::optional(in, 5);
  if (a.dim() >= 2 && b.dim() >= 2 && one_value(in[1]) && one_value(in[2]) && one_value(in[4]) &&
      (!b_zero.defined() || one_value(b_zero)) && one_value(in[6]) && one_value(in[7]) &&
      float32_scales({in[1], in[4], in[6]}) && in[2].dtype() == a.dtype() &&
      (!b_zero.defined() || b_zero.dtype() == b.dtype()) && a.shape().back() == b.shape()[b.dim() - 2]) {
    const Tensor bz = b_zero.defined() ? b_zero.reshape({}) : zeros({}, b.dtype());
    const int64_t k = a.shape().back();
    if (b.dim() == 2 && k > 0) {  // fixed b (asymmetric weights): a's rows as one batch
      Shape ys = a.shape();
      ys.back() = b.shape()[1];
      return {qlinear_batch_matmul(a.reshape({a.numel() / k, k}), in[1].reshape({}), in[2].reshape({}), b,
                                   in[4].reshape({}), bz, in[6].reshape({}), in[7].reshape({}))
                  .reshape(ys)};
    }
    Shape batch =
        broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2), Shape(b.shape().begin(), b.shape().end() - 2));
    Shape as = batch, bs = batch;
    as.insert(as.end(), a.shape().end() - 2, a.shape().end());
    bs.insert(bs.end(), b.shape().end() - 2, b.shape().end());
    return {qlinear_batch_matmul(a.expand(as), in[1].reshape({}), in[2].reshape({}), b.expand(bs), in[4].reshape({}),
                                 bz, in[6].reshape({}), in[7].reshape({}))};
  }
  const Tensor acc = matmul(centered(n, a, per_row(input(n, in, 2), a)), centered(n, b, input(n, in, 5)));
  const Tensor multiplier = per_row(input(n, in, 1), a) * input(n, in, 4) / input(n, in, 6);
  return {requantize(n, acc, multiplier, input(n, in, 7))};
}

// QLinearConv: the int32 convolution (plus the int32 bias) requantized with
// x_scale * w_scale / y_scale, w_scale per output channel or one value.
std::vector<Tensor> qlinear_conv(const OnnxNode& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  const Tensor &x = input(n, in, 0), &w = input(n, in, 3);
  const Tensor bias = OnnxReader::optional(in, 8);
  if ((x.dim() == 3 || x.dim() == 4) && w.dim() == x.dim() && symmetric_int8(w, input(n, in, 5)) &&
      one_value(in[1]) && one_value(in[2]) && one_value(in[6]) && one_value(in[7]) &&
      float32_scales({in[1], in[4], in[6]}) && (in[4].numel() == 1 || in[4].numel() == w.shape()[0]) &&
      (!bias.defined() || bias.dtype() == DType::Int32)) {
    const ConvGeometry g = conv_geometry(n, x, w);
    const Tensor x_zero = in[2].reshape({});
    // Uneven pads become a border holding the zero point (the quantized 0.0), where that is fixed.
    if (!g.has_border || !kiln::detail::values_vary(x_zero)) {
      const Tensor padded = g.has_border ? pad_spatial(x, g.border, cast(x_zero, DType::Float64).item<double>()) : x;
      return {g.rank.lower(qlinear_conv2d(g.rank.lift(padded), in[1], x_zero, g.rank.lift(w),
                                          in[4].reshape({in[4].numel()}), in[6], in[7].reshape({}), bias, g.options))};
    }
  }
  const Tensor acc = conv_of_centered(n, x, input(n, in, 2), w, input(n, in, 5), bias);
  const Tensor multiplier = input(n, in, 1).reshape({}) * per_axis(input(n, in, 4), 1, acc.dim()) / input(n, in, 6).reshape({});
  return {requantize(n, acc, multiplier, input(n, in, 7))};
}

// com.microsoft's QGemm with a quantized output (ONNX Runtime's quantizer
// writes it for Gemm): A B' (B' = B or its transpose) plus an int32 bias C in
// the accumulator's scale, requantized with alpha * a_scale * b_scale / y_scale.
std::vector<Tensor> qgemm(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &a = input(n, in, 0), &b = input(n, in, 3);
  if (in.size() < 9 || !in[7].defined())
    n.unsupported("QGemm with a float output (no y_scale) is not supported; quantize its output");
  if (a.dim() != 2 || b.dim() != 2) n.fail("A and B must be 2-d, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  const bool trans_a = n.i("transA", 0) != 0, trans_b = n.i("transB", 0) != 0;
  const double alpha = n.f("alpha", 1.0);
  const Tensor bias = OnnxReader::optional(in, 6);
  const Tensor bt = trans_b ? b.transpose(0, 1).contiguous() : b;
  const int64_t columns = bt.shape()[1];
  if (!trans_a && alpha == 1.0 && symmetric_int8(b, input(n, in, 5)) && one_value(in[1]) && one_value(in[2]) &&
      one_value(in[7]) && one_value(in[8]) && float32_scales({in[1], in[4], in[7]}) &&
      (in[4].numel() == 1 || in[4].numel() == columns) &&
      (!bias.defined() || (bias.dtype() == DType::Int32 && bias.numel() == columns)))
    return {qlinear_matmul(a, in[1], in[2].reshape({}), bt, in[4].reshape({in[4].numel()}), in[7], in[8].reshape({}),
                           bias.defined() ? bias.reshape({columns}) : bias)};
  const Tensor at = trans_a ? a.transpose(0, 1) : a;
  const Tensor b_zero = OnnxReader::optional(in, 5);
  Tensor acc = matmul(centered(n, at.contiguous(), OnnxReader::optional(in, 2)),
                      centered(n, bt, b_zero.defined() && b_zero.numel() > 1 ? b_zero.reshape({1, columns}) : b_zero));
  if (bias.defined()) acc = acc + cast(bias, DType::Float64);
  const Tensor b_scale = input(n, in, 4).numel() > 1 ? input(n, in, 4).reshape({1, columns}) : input(n, in, 4).reshape({});
  const Tensor multiplier = input(n, in, 1).reshape({}) * b_scale * scalar_tensor(alpha, DType::Float32) / input(n, in, 7).reshape({});
  return {requantize(n, acc, multiplier, input(n, in, 8))};
}

// com.microsoft's QLinearAdd (A, A_scale, A_zero, B, B_scale, B_zero,
// C_scale, C_zero): the dequantized sum, quantized. Operands of one shape
// add on the integer kernel; broadcasting ones through float32.
std::vector<Tensor> qlinear_add(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &a = input(n, in, 0), &b = input(n, in, 3);
  for (int i : {1, 2, 4, 5, 6, 7})
    if (input(n, in, i).numel() != 1) n.unsupported("per-axis scales and zero points are not supported here");
  auto scalar = [&](int i) { return input(n, in, i).reshape({}); };
  if (a.shape() == b.shape() && a.dtype() == b.dtype() && float32_scales({in[1], in[4], in[6]}))
    return {qlinear_add(a, scalar(1), scalar(2), b, scalar(4), scalar(5), scalar(6), scalar(7))};
  check_quantized(n, a.dtype(), false);
  check_quantized(n, b.dtype(), false);
  auto real = [&](const Tensor& q, int at) {
    return (cast(q, DType::Float32) - cast(scalar(at + 1), DType::Float32)) * cast(scalar(at), DType::Float32);
  };
  return {quantize(real(a, 1) + real(b, 4), cast(scalar(6), DType::Float32), scalar(7))};
}

// com.microsoft's QLinearConcat (Y_scale, Y_zero_point, then X, X_scale,
// X_zero_point per input; axis): each input requantized to Y's parameters.
std::vector<Tensor> qlinear_concat(const OnnxNode& n, const std::vector<Tensor>& in) {
  if (in.size() < 5 || (in.size() - 2) % 3 != 0)
    n.fail("takes Y_scale, Y_zero_point, then X, X_scale and X_zero_point for each input; got ", in.size(), " inputs");
  if (!n.has("axis")) n.fail("has no axis attribute");
  std::vector<QuantizedTensor> parts;
  for (size_t i = 0; i < in.size(); ++i)
    if (i % 3 != 2 && input(n, in, static_cast<int>(i)).numel() != 1)
      n.unsupported("per-axis scales and zero points are not supported here");
  for (size_t i = 2; i < in.size(); i += 3) {
    const int at = static_cast<int>(i);
    parts.push_back({input(n, in, at), input(n, in, at + 1).reshape({}), input(n, in, at + 2).reshape({})});
  }
  return {qlinear_concat(parts, input(n, in, 0).reshape({}), input(n, in, 1).reshape({}),
                         normalize_axis(n, n.i("axis", 1), parts[0].values.dim()))};
}

// com.microsoft's QLinearAveragePool and QLinearGlobalAveragePool (X,
// X_scale, X_zero_point, Y_scale, Y_zero_point): on the integer kernel for
// 2-d windows with symmetric padding; a global pool of another rank as the
// mean of the dequantized values, quantized.
std::vector<Tensor> qlinear_average_pool(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  check_quantized(n, x.dtype(), false);
  for (int i : {1, 2, 3, 4})
    if (input(n, in, i).numel() != 1) n.unsupported("per-axis scales and zero points are not supported here");
  if (n.i("channels_last", 0) != 0) n.unsupported("channels_last=1 is not supported (channels-first inputs are)");
  auto scalar = [&](int i) { return input(n, in, i).reshape({}); };
  const bool global = n.op_type() == "QLinearGlobalAveragePool";
  if (x.dim() == 4 && global)
    return {qlinear_avg_pool2d(x, scalar(1), scalar(2), scalar(3), scalar(4), {x.shape()[2], x.shape()[3]})};
  if (x.dim() == 4) {
    const onnx_spatial::PoolGeometry g = onnx_spatial::pool_geometry(n, x);
    bool plain = g.kernel.size() == 2 && n.i("ceil_mode", 0) == 0 && onnx_spatial::pads_fit_kernel(g.kernel, g.pads);
    for (int64_t d : g.dilation) plain = plain && d == 1;
    if (plain)
      return {qlinear_avg_pool2d(x, scalar(1), scalar(2), scalar(3), scalar(4), g.kernel, g.stride, g.pads.begin,
                                 n.i("count_include_pad", 0) != 0)};
  }
  if (!global)
    n.unsupported("windows other than 2-d ones with symmetric padding, no ceil_mode and no dilations are not supported");
  std::vector<int64_t> spatial;
  for (int64_t d = 2; d < x.dim(); ++d) spatial.push_back(d);
  const Tensor real = (cast(x, DType::Float32) - cast(scalar(2), DType::Float32)) * scalar(1);
  return {quantize(mean(real, spatial, true), scalar(3), scalar(4))};
}

// The scale and zero point that map [min(x, 0), max(x, 0)] onto [0, 255],
// and x quantized by them: one op.
std::vector<Tensor> dynamic_quantize_linear(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& given = input(n, in, 0);
  return kiln::dynamic_quantize_linear(given.dtype() == DType::Float32 ? given : cast(given, DType::Float32));
}

// Quantized input i (with scale i + 1 and zero point i + 2, absent: 0 of
// the input's type) in float32, as ONNX Runtime dequantizes.
Tensor dequantized(const OnnxNode& n, const std::vector<Tensor>& in, int i) {
  const Tensor& q = input(n, in, i);
  check_quantized(n, q.dtype(), false);
  const Tensor scale = input(n, in, i + 1), zero = OnnxReader::optional(in, i + 2);
  if (scale.numel() != 1 || (zero.defined() && zero.numel() != 1))
    n.unsupported("per-axis scales and zero points are not supported here");
  const Tensor centered =
      zero.defined() ? cast(q, DType::Float32) - cast(zero.reshape({}), DType::Float32) : cast(q, DType::Float32);
  return centered * cast(scale.reshape({}), DType::Float32);
}

// y quantized with scale i and zero point i + 1 (absent: 0 of the input's
// type, which the output then has).
Tensor requantized(const OnnxNode& n, const std::vector<Tensor>& in, const Tensor& y, int i) {
  const Tensor zero = OnnxReader::optional(in, i + 1);
  if (input(n, in, i).numel() != 1 || (zero.defined() && zero.numel() != 1))
    n.unsupported("per-axis scales and zero points are not supported here");
  return quantize(y, cast(input(n, in, i).reshape({}), DType::Float32),
                  zero.defined() ? zero.reshape({}) : zeros({}, input(n, in, 0).dtype()));
}

// com.microsoft's QLinearSigmoid and QLinearLeakyRelu (X, X_scale,
// X_zero_point, Y_scale, Y_zero_point): the float op between dequantizing
// and quantizing.
std::vector<Tensor> qlinear_sigmoid(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {requantized(n, in, sigmoid(dequantized(n, in, 0)), 3)};
}

std::vector<Tensor> qlinear_leaky_relu(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {requantized(n, in, leaky_relu(dequantized(n, in, 0), n.f("alpha", 0.01)), 3)};
}

// com.microsoft's QLinearMul (A, A_scale, A_zero_point, B, B_scale,
// B_zero_point, C_scale, C_zero_point): the product of the dequantized
// operands (broadcasting), quantized.
std::vector<Tensor> qlinear_mul(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {requantized(n, in, dequantized(n, in, 0) * dequantized(n, in, 3), 6)};
}

// acc * a_scale * b_scale (b_scale one value or one per column), plus the
// bias, in float32: the float outputs of ONNX Runtime's integer products.
Tensor scaled_product(const Tensor& acc, const Tensor& a_scale, const Tensor& b_scale, const Tensor& bias) {
  const Tensor y =
      cast(acc * cast(a_scale.reshape({}), DType::Float64) * cast(b_scale, DType::Float64), DType::Float32);
  return bias.defined() ? y + cast(bias, DType::Float32) : y;
}

// (a - a_zero) @ (b - b_zero) * a_scale * b_scale + bias in float32: on the
// matmul_integer_to_float op (int8 kernels) where b is symmetric int8
// [k, n] and the scales and bias fit it, else in float64.
Tensor integer_to_float(const OnnxNode& n, const Tensor& a, const Tensor& a_scale, const Tensor& a_zero,
                        const Tensor& b, const Tensor& b_scale, const Tensor& b_zero, const Tensor& bias) {
  if (a_scale.numel() != 1 || (a_zero.defined() && a_zero.numel() != 1))
    n.unsupported("a per-row scale or zero point of A is not supported (one value each is)");
  const int64_t cols = b.dim() == 2 ? b.shape()[1] : -1;
  const bool on_op = cols >= 0 && a.dim() >= 1 && (a.dtype() == DType::UInt8 || a.dtype() == DType::Int8) &&
                     (!a_zero.defined() || a_zero.dtype() == a.dtype()) && symmetric_int8(b, b_zero) &&
                     float32_scales({a_scale, b_scale}) && (b_scale.numel() == 1 || b_scale.numel() == cols) &&
                     (!bias.defined() || (bias.dtype() == DType::Float32 && bias.numel() == cols));
  if (on_op)
    return kiln::matmul_integer_to_float(a, a_scale.reshape({}),
                                         a_zero.defined() ? a_zero.reshape({}) : zeros({}, a.dtype()), b,
                                         b_scale.numel() == 1 ? b_scale.reshape({}) : b_scale.reshape({cols}),
                                         bias.defined() ? bias.reshape({cols}) : bias);
  const Tensor acc = matmul(centered(n, a, a_zero.defined() ? a_zero.reshape({}) : a_zero), centered(n, b, b_zero));
  return scaled_product(acc, a_scale, b_scale, bias);
}

// com.microsoft's MatMulIntegerToFloat (A, B, a_scale, b_scale,
// a_zero_point, b_zero_point, bias).
std::vector<Tensor> matmul_integer_to_float(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {integer_to_float(n, input(n, in, 0), input(n, in, 2), OnnxReader::optional(in, 4), input(n, in, 1),
                           input(n, in, 3), OnnxReader::optional(in, 5), OnnxReader::optional(in, 6))};
}

// com.microsoft's DynamicQuantizeMatMul (A, B, b_scale, b_zero_point,
// bias): A quantized to uint8 as DynamicQuantizeLinear does, then as
// MatMulIntegerToFloat.
std::vector<Tensor> dynamic_quantize_matmul(const OnnxNode& n, const std::vector<Tensor>& in) {
  const std::vector<Tensor> q = dynamic_quantize_linear(n, {input(n, in, 0)});
  return {integer_to_float(n, q[0], q[1], q[2], input(n, in, 1), input(n, in, 2), OnnxReader::optional(in, 3),
                           OnnxReader::optional(in, 4))};
}

// uint8 [..., width] holding codes of `bits` bits, low bits first, as
// float32 [..., width * 8 / bits]: a composition that constant folding runs
// once on constant codes.
Tensor unpacked_codes(const Tensor& packed, int64_t bits) {
  const int64_t per = 8 / bits;
  const Tensor bytes = cast(packed, DType::Float32);
  const Tensor levels = scalar_like(static_cast<double>(1 << bits), bytes);
  std::vector<Tensor> parts;
  Tensor rest = bytes;  // the bytes shifted right j * bits
  for (int64_t j = 0; j < per; ++j) {
    const Tensor above = floor(rest / levels);
    parts.push_back(rest - above * levels);
    rest = above;
  }
  Shape shape = packed.shape();
  shape.back() *= per;
  return stack(parts, -1).reshape(shape);
}

// Zero points packed as ONNX Runtime's MatMulNBits stores them (uint8, each
// row's blocks low bits first, a row rounded up to whole bytes) as float32
// [N, blocks]; given in A's type, reshaped.
Tensor nbits_zero_points(const OnnxNode& n, const Tensor& z, int64_t rows, int64_t blocks, int64_t bits) {
  if (z.dtype() != DType::UInt8) {
    if (z.numel() != rows * blocks) n.fail("zero_points holds ", z.numel(), " values; N x blocks = ", rows * blocks);
    return cast(z, DType::Float32).reshape({rows, blocks});
  }
  const int64_t per = 8 / bits, width = (blocks + per - 1) / per;
  if (z.numel() != rows * width)
    n.fail("zero_points holds ", z.numel(), " bytes; ", rows, " rows of ", width, " (", blocks, " blocks of ", bits,
           " bits) expected");
  return unpacked_codes(z.reshape({rows, width}), bits).slice(1, 0, blocks).contiguous();
}

// com.microsoft's MatMulNBits (A, B, scales, zero_points, g_idx, bias):
// weights quantized to 2, 4 or 8 bits in blocks along K, as ONNX Runtime's
// MatMulNBitsQuantizer and LLM exporters write them. accuracy_level 4 (int8
// compute) rounds A to int8 per block, as ONNX Runtime does; levels 0 to 3
// (a lower bound on the accuracy) compute in float32.
std::vector<Tensor> matmul_nbits(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& a = input(n, in, 0);
  const int64_t k = n.i("K", -1), cols = n.i("N", -1), bits = n.i("bits", 4), block = n.i("block_size", -1);
  if (k <= 0 || cols <= 0 || block <= 0) n.fail("the attributes K, N and block_size are required");
  if (bits != 2 && bits != 4 && bits != 8) n.unsupported("bits=", bits, " (2, 4 and 8 are supported)");
  if (a.dim() < 1 || a.shape().back() != k) n.fail("A must be [..., K] with K = ", k, ", got ", shape_str(a.shape()));
  if (OnnxReader::optional(in, 4).defined())
    n.unsupported("g_idx (act-order block indices, deprecated in ONNX Runtime) is not supported");
  const int64_t blocks = (k + block - 1) / block, blob = block * bits / 8;
  const Tensor& b = input(n, in, 1);
  if (b.dtype() != DType::UInt8 || b.numel() != cols * blocks * blob)
    n.fail("B must be uint8 [N, blocks, blob] = [", cols, ", ", blocks, ", ", blob, "], got ", dtype_name(b.dtype()),
           shape_str(b.shape()));
  const Tensor& scales = input(n, in, 2);
  if (scales.numel() != cols * blocks) n.fail("scales holds ", scales.numel(), " values; N x blocks = ", cols * blocks);
  const Tensor zeros = OnnxReader::optional(in, 3), bias = OnnxReader::optional(in, 5);
  // (float16 models: computed in float32, the result cast back)
  auto f32 = [](const Tensor& t) { return t.dtype() == DType::Float32 ? t : cast(t, DType::Float32); };
  const Tensor y = kiln::matmul_nbits(f32(a), b.reshape({cols, blocks, blob}), f32(scales).reshape({cols, blocks}),
                                      zeros.defined() ? nbits_zero_points(n, zeros, cols, blocks, bits) : Tensor(),
                                      bias.defined() ? f32(bias).reshape({cols}) : Tensor(), bits, block,
                                      n.i("accuracy_level", 0) == 4 ? 4 : 0);
  return {a.dtype() == DType::Float32 ? y : cast(y, a.dtype())};
}

// com.microsoft's GatherBlockQuantized (data, indices, scales, zero_points?):
// rows of a uint8 table of 2-, 4- or 8-bit codes packed along its last axis,
// in blocks of block_size along it with a scale and a zero point each (2^(bits
// - 1) by default), gathered on axis 0 and dequantized, (q - zero) * scale,
// in the scales' type; an index out of range gives a row of zeros.
// onnxruntime-genai's quantized embeddings.
std::vector<Tensor> gather_block_quantized(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor &data = input(n, in, 0), &indices = input(n, in, 1), &scales = input(n, in, 2);
  const Tensor zero_points = OnnxReader::optional(in, 3);
  if (data.dtype() != DType::UInt8)
    n.unsupported("data of type ", dtype_name(data.dtype()),
                  " is not supported (uint8 codes are; int4, uint4, float8 and float4 tables are not)");
  const int64_t rank = data.dim(), bits = n.i("bits", 4), block = n.i("block_size", 128);
  if (rank < 2) n.fail("data must have at least 2 axes, got ", shape_str(data.shape()));
  if (normalize_axis(n, n.i("gather_axis", 0), rank) != 0 ||
      normalize_axis(n, n.i("quantize_axis", 1), rank) != rank - 1)
    n.unsupported("gather_axis other than 0 or quantize_axis other than the last is not supported for uint8 data");
  if (bits != 2 && bits != 4 && bits != 8) n.fail("bits must be 2, 4 or 8, got ", bits);
  if (block < 16 || (block & (block - 1))) n.fail("block_size must be a power of 2 of at least 16, got ", block);
  const int64_t rows = data.shape()[0], width = data.shape().back() * (8 / bits), blocks = (width + block - 1) / block;
  Shape table_blocks = data.shape();
  table_blocks.back() = blocks;
  if (scales.shape() != table_blocks)
    n.fail("scales ", shape_str(scales.shape()), " must be ", shape_str(table_blocks), ": a scale per block of ", block,
           " of data's ", width, " values along its last axis");
  // Indices from the end wrap; those out of range read row 0 and give zeros.
  const Tensor index = cast(indices, DType::Int64), count = scalar_tensor(static_cast<double>(rows), DType::Int64);
  const Tensor none = zeros({}, DType::Int64);
  const Tensor wrapped = where(lt(index, none), index + count, index);
  const Tensor valid = where(ge(wrapped, none), lt(wrapped, count), zeros({}, DType::Bool));
  const Tensor picked = where(valid, wrapped, none).reshape({-1});
  // Each block's scale and zero point spread over its values.
  auto per_value = [&](const Tensor& per_block) {
    Shape s = per_block.shape();
    s.push_back(block);
    Shape flat = per_block.shape();
    flat.back() *= block;
    return per_block.unsqueeze(-1).expand(s).reshape(flat).slice(-1, 0, width);
  };
  const Tensor codes = unpacked_codes(index_select(data, 0, picked), bits);
  const Tensor scale = per_value(cast(index_select(scales, 0, picked), DType::Float32));
  Tensor zero = scalar_tensor(static_cast<double>(1 << (bits - 1)), DType::Float32);
  if (zero_points.defined()) {
    if (zero_points.dtype() != DType::UInt8 || zero_points.dim() != rank || zero_points.shape()[0] != rows)
      n.fail("zero_points must be uint8 [", rows, ", ...], packed as data is; got ", dtype_name(zero_points.dtype()),
             shape_str(zero_points.shape()));
    zero = per_value(unpacked_codes(index_select(zero_points, 0, picked), bits).slice(-1, 0, blocks));
  }
  Shape shape = indices.shape();
  for (int64_t d = 1; d < rank - 1; ++d) shape.push_back(data.shape()[d]);
  shape.push_back(width);
  Shape row_mask = indices.shape();
  row_mask.resize(shape.size(), 1);
  const Tensor values = ((codes - zero) * scale).reshape(shape);
  const Tensor y = where(valid.reshape(row_mask), values, zeros({}, DType::Float32));
  return {scales.dtype() == DType::Float32 ? y : cast(y, scales.dtype())};
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
  t["MatMulInteger"] = matmul_integer;
  t["ConvInteger"] = conv_integer;
  t["QLinearMatMul"] = qlinear_matmul;
  t["QLinearConv"] = qlinear_conv;
  t["com.microsoft::QGemm"] = qgemm;
  t["com.microsoft::QLinearAdd"] = qlinear_add;
  t["com.microsoft::QLinearConcat"] = qlinear_concat;
  t["com.microsoft::QLinearAveragePool"] = qlinear_average_pool;
  t["com.microsoft::QLinearGlobalAveragePool"] = qlinear_average_pool;
  t["com.microsoft::MatMulIntegerToFloat"] = matmul_integer_to_float;
  t["com.microsoft::QLinearSigmoid"] = qlinear_sigmoid;
  t["com.microsoft::QLinearLeakyRelu"] = qlinear_leaky_relu;
  t["com.microsoft::QLinearMul"] = qlinear_mul;
  t["com.microsoft::DynamicQuantizeMatMul"] = dynamic_quantize_matmul;
  t["com.microsoft::MatMulNBits"] = matmul_nbits;
  t["com.microsoft::GatherBlockQuantized"] = gather_block_quantized;
  t["EyeLike"] = eye_like;
  t["LpPool"] = lp_pool;
}

}  // namespace kiln::runtime

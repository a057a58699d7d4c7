// Integer convolution and matrix products, the sum, the concatenation and the
// average pool of quantized tensors (a value q of
// uint8 or int8 stands for scale * (q - zero)), requantized to the output's
// scale and zero point: ONNX's QLinearConv and QLinearMatMul where the
// weights are symmetric int8 (zero points 0), as quantizers write them; and
// the float32 result of a dynamically quantized product.
#include "ops/conv_attrs.h"
#include "ops/op_helpers.h"
#include "ops/pool_attrs.h"

namespace kiln {
namespace {
using detail::Metas;

bool is_quantized(DType t) { return t == DType::UInt8 || t == DType::Int8; }

void check_scalar(const TensorMeta& m, const char* name) {
  KILN_CHECK(m.shape.empty() || (m.shape.size() == 1 && m.shape[0] == 1), name, " must be one value, got ",
             shape_str(m.shape));
}

// An integer op: no gradient, outputs "y".
OpDef quantized_op(std::string name, std::vector<std::string> inputs, std::vector<std::string> attrs, InferFn infer,
                   std::string category, uint32_t tags = 0) {
  OpDef d;
  d.name = std::move(name);
  d.inputs = std::move(inputs);
  d.outputs = {"y"};
  d.attrs = std::move(attrs);
  d.infer = std::move(infer);
  d.tags = kTagNondifferentiable | tags;
  d.category = std::move(category);
  return d;
}

// The quantization parameters of an operand x (scale, zero point), of the
// weights (int8, a scale per output channel or one) and of the output;
// returns the output's dtype, the zero point's.
DType check_quantization(const Metas& in, size_t weight, size_t w_scale, int64_t channels) {
  const TensorMeta &x = in[0], &x_scale = in[1], &x_zero = in[2], &w = in[weight], &ws = in[w_scale],
                   &y_scale = in[w_scale + 1], &y_zero = in[w_scale + 2];
  KILN_CHECK(is_quantized(x.dtype), "the input must be uint8 or int8, got ", dtype_name(x.dtype));
  KILN_CHECK(x_zero.dtype == x.dtype, "the input's zero point is ", dtype_name(x_zero.dtype), " but the input is ",
             dtype_name(x.dtype));
  KILN_CHECK(w.dtype == DType::Int8, "the weights must be int8 (symmetric), got ", dtype_name(w.dtype));
  for (const TensorMeta* s : {&x_scale, &ws, &y_scale})
    KILN_CHECK(s->dtype == DType::Float32, "scales must be float32, got ", dtype_name(s->dtype));
  check_scalar(x_scale, "the input's scale");
  check_scalar(x_zero, "the input's zero point");
  check_scalar(y_scale, "the output's scale");
  check_scalar(y_zero, "the output's zero point");
  const bool per_channel = ws.shape.size() == 1 && ws.shape[0] == channels;
  KILN_CHECK(per_channel || ws.shape.empty() || ws.shape == Shape{1}, "the weights' scale must be one value or one per ",
             "output channel (", channels, "), got ", shape_str(ws.shape));
  KILN_CHECK(is_quantized(y_zero.dtype), "the output's zero point must be uint8 or int8, got ", dtype_name(y_zero.dtype));
  if (in.size() > w_scale + 3 && in[w_scale + 3].defined) {
    const TensorMeta& b = in[w_scale + 3];
    KILN_CHECK(b.dtype == DType::Int32 && b.shape == Shape{channels}, "the bias must be int32 [", channels,
               "] (in the accumulator's scale, input scale x weight scale), got ", dtype_name(b.dtype), shape_str(b.shape));
  }
  return y_zero.dtype;
}

int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

Metas infer_qlinear_conv2d(const Metas& in, const Attrs& a) {
  detail::check_rank(in[0], 4, "input", "N, C, H, W");
  detail::check_rank(in[3], 4, "weight", "out_channels, in_channels/groups, kH, kW");
  const Shape &x = in[0].shape, &w = in[3].shape;
  const DType out = check_quantization(in, 3, 4, w[0]);
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  for (int i = 0; i < 2; ++i)
    KILN_CHECK(c.stride[i] > 0 && c.padding[i] >= 0 && c.dilation[i] > 0,
               "stride and dilation must be positive and padding >= 0");
  KILN_CHECK(c.groups > 0 && x[1] == w[1] * c.groups && w[0] % c.groups == 0, "input has ", x[1],
             " channels but weight ", shape_str(w), " with groups=", c.groups, " expects ", w[1] * c.groups);
  const int64_t oh = conv_out_size(x[2], w[2], c.stride[0], c.padding[0], c.dilation[0]);
  const int64_t ow = conv_out_size(x[3], w[3], c.stride[1], c.padding[1], c.dilation[1]);
  KILN_CHECK(oh > 0 && ow > 0, "input ", shape_str(x), " is too small for a ", w[2], "x", w[3], " kernel");
  return {{true, {x[0], w[0], oh, ow}, out, in[0].device}};
}

Metas infer_qlinear_matmul(const Metas& in, const Attrs&) {
  const Shape &a = in[0].shape, &b = in[3].shape;
  KILN_CHECK(a.size() >= 2, "a must have rank >= 2, got ", shape_str(a));
  detail::check_rank(in[3], 2, "b", "K, N");
  KILN_CHECK(a.back() == b[0], "inner dimensions differ: ", shape_str(a), " @ ", shape_str(b));
  const DType out = check_quantization(in, 3, 4, b[1]);
  Shape y = a;
  y.back() = b[1];
  return {{true, y, out, in[0].device}};
}

OpDefiner d_qlinear_conv2d(quantized_op("qlinear_conv2d",
                                         {"x", "x_scale", "x_zero", "weight", "w_scale", "y_scale", "y_zero", "bias?"},
                                         {"stride:ints=[1,1]", "padding:ints=[0,0]", "dilation:ints=[1,1]", "groups:int=1"},
                                         infer_qlinear_conv2d, "convolution"));

OpDefiner d_qlinear_matmul(quantized_op("qlinear_matmul", {"a", "a_scale", "a_zero", "b", "b_scale", "y_scale", "y_zero", "bias?"},
                                         {}, infer_qlinear_matmul, "matmul"));

// Two quantized activations' product, batch by batch: a [..., M, K] and
// b [..., K, N] of one batch shape, each with its own scale and zero point.
Metas infer_qlinear_batch_matmul(const Metas& in, const Attrs&) {
  const TensorMeta &a = in[0], &b = in[3];
  KILN_CHECK(is_quantized(a.dtype) && is_quantized(b.dtype), "a and b must be uint8 or int8, got ", dtype_name(a.dtype),
             " and ", dtype_name(b.dtype));
  KILN_CHECK(a.shape.size() >= 2 && b.shape.size() == a.shape.size(), "a [..., M, K] and b [..., K, N] must have one ",
             "rank of at least 2, got ", shape_str(a.shape), " and ", shape_str(b.shape));
  const size_t r = a.shape.size();
  KILN_CHECK(Shape(a.shape.begin(), a.shape.end() - 2) == Shape(b.shape.begin(), b.shape.end() - 2) &&
                 a.shape[r - 1] == b.shape[r - 2],
             "a [..., M, K] and b [..., K, N] must share their batch dimensions and K, got ", shape_str(a.shape), " @ ",
             shape_str(b.shape));
  for (size_t i : {1, 4, 6}) {
    KILN_CHECK(in[i].dtype == DType::Float32, "scales must be float32, got ", dtype_name(in[i].dtype));
    check_scalar(in[i], "a scale");
  }
  for (size_t i : {2, 5, 7}) check_scalar(in[i], "a zero point");
  KILN_CHECK(in[2].dtype == a.dtype && in[5].dtype == b.dtype, "each zero point must have its operand's dtype, got ",
             dtype_name(in[2].dtype), " for ", dtype_name(a.dtype), " a and ", dtype_name(in[5].dtype), " for ",
             dtype_name(b.dtype), " b");
  KILN_CHECK(is_quantized(in[7].dtype), "the output's zero point must be uint8 or int8, got ", dtype_name(in[7].dtype));
  Shape y = a.shape;
  y.back() = b.shape.back();
  return {{true, y, in[7].dtype, a.device}};
}

OpDefiner d_qlinear_batch_matmul(quantized_op("qlinear_batch_matmul",
                                              {"a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"},
                                              {}, infer_qlinear_batch_matmul, "matmul"));

// An integer product with a float32 result, as dynamic quantization makes
// it: a [..., K] (uint8 or int8, one scale and zero point, computed per
// run) by symmetric int8 b [K, N] (scale one value or one per column), the
// int32 sums times a_scale * b_scale, plus an optional float32 bias [N].
Metas infer_matmul_integer_to_float(const Metas& in, const Attrs&) {
  const TensorMeta &a = in[0], &b = in[3], &b_scale = in[4];
  KILN_CHECK(is_quantized(a.dtype), "a must be uint8 or int8, got ", dtype_name(a.dtype));
  KILN_CHECK(b.dtype == DType::Int8 && b.shape.size() == 2, "b must be int8 [K, N] (symmetric weights), got ",
             dtype_name(b.dtype), shape_str(b.shape));
  KILN_CHECK(!a.shape.empty() && a.shape.back() == b.shape[0], "a [..., K] and b [K, N] must share K, got ",
             shape_str(a.shape), " @ ", shape_str(b.shape));
  KILN_CHECK(in[1].dtype == DType::Float32 && b_scale.dtype == DType::Float32, "scales must be float32, got ",
             dtype_name(in[1].dtype), " and ", dtype_name(b_scale.dtype));
  check_scalar(in[1], "a's scale");
  check_scalar(in[2], "a's zero point");
  KILN_CHECK(in[2].dtype == a.dtype, "a's zero point is ", dtype_name(in[2].dtype), " but a is ", dtype_name(a.dtype));
  const int64_t n = b.shape[1];
  KILN_CHECK(b_scale.shape.empty() || b_scale.shape == Shape{1} || b_scale.shape == Shape{n},
             "b's scale must be one value or one per column (", n, "), got ", shape_str(b_scale.shape));
  if (in.size() > 5 && in[5].defined)
    KILN_CHECK(in[5].dtype == DType::Float32 && in[5].shape == Shape{n}, "the bias must be float32 [", n, "], got ",
               dtype_name(in[5].dtype), shape_str(in[5].shape));
  Shape y = a.shape;
  y.back() = n;
  return {{true, y, DType::Float32, a.device}};
}

OpDefiner d_matmul_integer_to_float(quantized_op("matmul_integer_to_float",
                                                 {"a", "a_scale", "a_zero", "b", "b_scale", "bias?"}, {},
                                                 infer_matmul_integer_to_float, "matmul"));

// A float32 product with weights quantized in blocks along K, as LLM exports
// store them (ONNX Runtime's MatMulNBits): a [..., K] by b, N rows of
// ceil(K / block_size) blocks of block_size codes of `bits` bits, packed
// low bits first into uint8 [N, blocks, block_size * bits / 8]; code q of
// row n in block j stands for (q - zero_points[n, j]) * scales[n, j];
// zero points float32 [N, blocks] (absent: 2^(bits - 1)); plus an optional
// float32 bias [N]. y [..., N] = a @ dequantized(b)^T + bias, in float32;
// with accuracy_level 4 (ONNX Runtime's "int8 compute"), a rounded to int8
// per block first (scale max |a| / 127, half to even) and the products of
// each block summed in integers.
Metas infer_matmul_nbits(const Metas& in, const Attrs& attrs) {
  const TensorMeta &a = in[0], &b = in[1], &scales = in[2];
  const int64_t bits = attrs.get_int("bits", 4), block = attrs.get_int("block_size", 32);
  KILN_CHECK(bits == 2 || bits == 4 || bits == 8, "bits must be 2, 4 or 8, got ", bits);
  const int64_t level = attrs.get_int("accuracy_level", 0);
  KILN_CHECK(level >= 0 && level <= 4, "accuracy_level must be 0 to 4 (4: int8 products; else float32), got ", level);
  KILN_CHECK(block >= 16 && (block & (block - 1)) == 0, "block_size must be a power of two of at least 16, got ",
             block);
  KILN_CHECK(a.dtype == DType::Float32 && !a.shape.empty(), "a must be float32 [..., K], got ", dtype_name(a.dtype),
             shape_str(a.shape));
  const int64_t k = a.shape.back(), blocks = (k + block - 1) / block;
  KILN_CHECK(b.dtype == DType::UInt8 && b.shape.size() == 3 && b.shape[1] == blocks && b.shape[2] == block * bits / 8,
             "b must be uint8 [N, ", blocks, ", ", block * bits / 8, "] (", blocks, " blocks of ", block, " ", bits,
             "-bit codes for K = ", k, "), got ", dtype_name(b.dtype), shape_str(b.shape));
  const int64_t n = b.shape[0];
  KILN_CHECK(scales.dtype == DType::Float32 && scales.shape == Shape({n, blocks}), "scales must be float32 [", n, ", ",
             blocks, "], got ", dtype_name(scales.dtype), shape_str(scales.shape));
  if (in.size() > 3 && in[3].defined)
    KILN_CHECK(in[3].dtype == DType::Float32 && in[3].shape == Shape({n, blocks}), "zero points must be float32 [", n,
               ", ", blocks, "], got ", dtype_name(in[3].dtype), shape_str(in[3].shape));
  if (in.size() > 4 && in[4].defined)
    KILN_CHECK(in[4].dtype == DType::Float32 && in[4].shape == Shape{n}, "the bias must be float32 [", n, "], got ",
               dtype_name(in[4].dtype), shape_str(in[4].shape));
  Shape y = a.shape;
  y.back() = n;
  return {{true, y, DType::Float32, a.device}};
}

OpDefiner d_matmul_nbits(quantized_op("matmul_nbits", {"a", "b", "scales", "zero_points?", "bias?"},
                                      {"bits:int=4", "block_size:int=32", "accuracy_level:int=0"}, infer_matmul_nbits,
                                      "matmul"));

// a and b of one shape, dequantized, added and quantized to y's parameters.
Metas infer_qlinear_add(const Metas& in, const Attrs&) {
  const TensorMeta &a = in[0], &b = in[3];
  KILN_CHECK(is_quantized(a.dtype) && b.dtype == a.dtype, "a and b must both be uint8 or both int8, got ",
             dtype_name(a.dtype), " and ", dtype_name(b.dtype));
  KILN_CHECK(a.shape == b.shape, "a and b must have one shape (no broadcasting), got ", shape_str(a.shape), " and ",
             shape_str(b.shape));
  for (size_t i : {1, 4, 6}) {
    KILN_CHECK(in[i].dtype == DType::Float32, "scales must be float32, got ", dtype_name(in[i].dtype));
    check_scalar(in[i], "a scale");
  }
  for (size_t i : {2, 5, 7}) check_scalar(in[i], "a zero point");
  KILN_CHECK(in[2].dtype == a.dtype && in[5].dtype == a.dtype, "the zero points of a and b must be ", dtype_name(a.dtype));
  KILN_CHECK(is_quantized(in[7].dtype), "the output's zero point must be uint8 or int8, got ", dtype_name(in[7].dtype));
  return {{true, a.shape, in[7].dtype, a.device}};
}

// Element i of the output depends on element i of a and b alone: it runs on any memory order.
OpDefiner d_qlinear_add(quantized_op("qlinear_add", {"a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"},
                                     {}, infer_qlinear_add, "", kTagElementwise));

// Quantized tensors of one dtype joined along `axis`, each requantized from
// its own parameters to y's: ONNX Runtime's QLinearConcat, with y's scale and
// zero point first and then (x, scale, zero) per input.
Metas infer_qlinear_concat(const Metas& in, const Attrs& a) {
  KILN_CHECK(in.size() >= 5 && (in.size() - 2) % 3 == 0, "takes y_scale, y_zero, then (x, x_scale, x_zero) for each ",
             "input; got ", in.size(), " tensors");
  const TensorMeta& first = in[2];
  const DType t = in[1].dtype;
  KILN_CHECK(is_quantized(t), "the output's zero point must be uint8 or int8, got ", dtype_name(t));
  KILN_CHECK(in[0].dtype == DType::Float32, "scales must be float32, got ", dtype_name(in[0].dtype));
  check_scalar(in[0], "the output's scale");
  check_scalar(in[1], "the output's zero point");
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  KILN_CHECK(rank > 0, "cannot concatenate 0-d tensors");
  int64_t axis = a.get_int("axis", 1);
  KILN_CHECK(axis >= -rank && axis < rank, "axis ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  Shape y = first.shape;
  y[static_cast<size_t>(axis)] = 0;
  for (size_t i = 2; i < in.size(); i += 3) {
    const TensorMeta &x = in[i], &scale = in[i + 1], &zero = in[i + 2];
    KILN_CHECK(x.dtype == t && zero.dtype == t, "every input and zero point must be ", dtype_name(t),
               " (the output's), got ", dtype_name(x.dtype), " and ", dtype_name(zero.dtype), " for input ", (i - 2) / 3);
    KILN_CHECK(scale.dtype == DType::Float32, "scales must be float32, got ", dtype_name(scale.dtype));
    check_scalar(scale, "an input's scale");
    check_scalar(zero, "an input's zero point");
    KILN_CHECK(static_cast<int64_t>(x.shape.size()) == rank, "input ", (i - 2) / 3, " has rank ", x.shape.size(),
               ", not ", rank);
    for (int64_t d = 0; d < rank; ++d)
      KILN_CHECK(d == axis || x.shape[static_cast<size_t>(d)] == first.shape[static_cast<size_t>(d)], "input ",
                 (i - 2) / 3, " is ", shape_str(x.shape), " but input 0 is ", shape_str(first.shape),
                 "; they may differ along axis ", axis, " only");
    y[static_cast<size_t>(axis)] += x.shape[static_cast<size_t>(axis)];
  }
  return {{true, y, t, first.device}};
}

OpDefiner d_qlinear_concat([] {
  OpDef d = quantized_op("qlinear_concat", {"y_scale", "y_zero", "inputs*"}, {"axis:int=1"}, infer_qlinear_concat, "shape");
  d.dispatch_input = 2;  // the first operand
  return d;
}());

// The average of each window of x [N, C, H, W] (padding symmetric, counted
// or not), requantized from x's parameters to y's: ONNX Runtime's
// QLinearAveragePool, and QLinearGlobalAveragePool with the whole plane as
// the window.
Metas infer_qlinear_avg_pool2d(const Metas& in, const Attrs& a) {
  detail::check_rank(in[0], 4, "input", "N, C, H, W");
  const TensorMeta& x = in[0];
  KILN_CHECK(is_quantized(x.dtype) && in[2].dtype == x.dtype && in[4].dtype == x.dtype,
             "x and both zero points must be uint8, or int8, alike; got ", dtype_name(x.dtype), ", ",
             dtype_name(in[2].dtype), " and ", dtype_name(in[4].dtype));
  for (size_t i : {1, 3}) {
    KILN_CHECK(in[i].dtype == DType::Float32, "scales must be float32, got ", dtype_name(in[i].dtype));
    check_scalar(in[i], "a scale");
  }
  for (size_t i : {2, 4}) check_scalar(in[i], "a zero point");
  const Pool2dAttrs p = Pool2dAttrs::of(a);
  KILN_CHECK(!p.ceil_mode && p.dilation[0] == 1 && p.dilation[1] == 1, "ceil_mode and dilation are not supported");
  Shape y = x.shape;
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(p.kernel[i] > 0 && p.stride[i] > 0 && p.padding[i] >= 0 && p.padding[i] < p.kernel[i],
               "kernel and stride must be positive, and padding between 0 and kernel - 1");
    y[2 + i] = (x.shape[2 + i] + 2 * p.padding[i] - p.kernel[i]) / p.stride[i] + 1;
    KILN_CHECK(y[2 + i] > 0, "input ", shape_str(x.shape), " is too small for a ", p.kernel[0], "x", p.kernel[1], " window");
  }
  return {{true, y, x.dtype, x.device}};
}

OpDefiner d_qlinear_avg_pool2d(quantized_op("qlinear_avg_pool2d", {"x", "x_scale", "x_zero", "y_scale", "y_zero"},
                                             {"kernel:ints", "stride:ints=kernel", "padding:ints=[0,0]",
                                              "count_include_pad:bool=true"},
                                             infer_qlinear_avg_pool2d, "pooling"));

// x (float32) to the 8-bit values of scale and zero (one each), and back:
// ONNX's QuantizeLinear and DequantizeLinear per tensor, as one pass each.
Metas infer_quantize_linear(const Metas& in, const Attrs&) {
  KILN_CHECK(in[0].dtype == DType::Float32, "x must be float32, got ", dtype_name(in[0].dtype));
  KILN_CHECK(in[1].dtype == DType::Float32, "the scale must be float32, got ", dtype_name(in[1].dtype));
  KILN_CHECK(is_quantized(in[2].dtype), "the zero point must be uint8 or int8, got ", dtype_name(in[2].dtype));
  check_scalar(in[1], "the scale");
  check_scalar(in[2], "the zero point");
  return {{true, in[0].shape, in[2].dtype, in[0].device}};
}

Metas infer_dequantize_linear(const Metas& in, const Attrs&) {
  KILN_CHECK(is_quantized(in[0].dtype) && in[2].dtype == in[0].dtype, "q and its zero point must be uint8, or int8, ",
             "alike; got ", dtype_name(in[0].dtype), " and ", dtype_name(in[2].dtype));
  KILN_CHECK(in[1].dtype == DType::Float32, "the scale must be float32, got ", dtype_name(in[1].dtype));
  check_scalar(in[1], "the scale");
  check_scalar(in[2], "the zero point");
  return {{true, in[0].shape, DType::Float32, in[0].device}};
}

// Element i of the output depends on element i of the input alone: they run on any memory order.
OpDefiner d_quantize_linear(quantized_op("quantize_linear", {"x", "scale", "zero"}, {}, infer_quantize_linear, "",
                                         kTagElementwise));
OpDefiner d_dequantize_linear(quantized_op("dequantize_linear", {"q", "scale", "zero"}, {}, infer_dequantize_linear, "",
                                           kTagElementwise));

// ONNX's DynamicQuantizeLinear: float32 x onto uint8 by the range
// [min(x, 0), max(x, 0)]: y, the scale (float32) and the zero point (uint8),
// the two computed from x on every call.
Metas infer_dynamic_quantize_linear(const Metas& in, const Attrs&) {
  KILN_CHECK(in[0].dtype == DType::Float32, "x must be float32, got ", dtype_name(in[0].dtype));
  return {{true, in[0].shape, DType::UInt8, in[0].device},
          {true, {}, DType::Float32, in[0].device},
          {true, {}, DType::UInt8, in[0].device}};
}

OpDefiner d_dynamic_quantize_linear([] {
  OpDef d = quantized_op("dynamic_quantize_linear", {"x"}, {}, infer_dynamic_quantize_linear, "");
  d.outputs = {"y", "y_scale", "y_zero_point"};
  return d;
}());

}  // namespace

Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor& zero) {
  return call1(KILN_OP("quantize_linear"), {x, scale, zero});
}
Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const Tensor& zero) {
  return call1(KILN_OP("dequantize_linear"), {q, scale, zero});
}
std::vector<Tensor> dynamic_quantize_linear(const Tensor& x) { return call(KILN_OP("dynamic_quantize_linear"), {x}); }

Tensor qlinear_concat(const std::vector<QuantizedTensor>& inputs, const Tensor& y_scale, const Tensor& y_zero,
                      int64_t axis) {
  std::vector<Tensor> in = {y_scale, y_zero};
  for (const QuantizedTensor& q : inputs) in.insert(in.end(), {q.values, q.scale, q.zero});
  return call1(KILN_OP("qlinear_concat"), in, {{"axis", axis}});
}

Tensor qlinear_avg_pool2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero, const Tensor& y_scale,
                          const Tensor& y_zero, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                          std::vector<int64_t> padding, bool count_include_pad) {
  if (stride.empty()) stride = kernel;
  return call1(KILN_OP("qlinear_avg_pool2d"), {x, x_scale, x_zero, y_scale, y_zero},
               {{"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"count_include_pad", count_include_pad}});
}

Tensor qlinear_add(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b, const Tensor& b_scale,
                   const Tensor& b_zero, const Tensor& y_scale, const Tensor& y_zero) {
  return call1(KILN_OP("qlinear_add"), {a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero});
}

Tensor qlinear_batch_matmul(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                            const Tensor& b_scale, const Tensor& b_zero, const Tensor& y_scale, const Tensor& y_zero) {
  return call1(KILN_OP("qlinear_batch_matmul"), {a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero});
}

Tensor matmul_integer_to_float(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                               const Tensor& b_scale, const Tensor& bias) {
  return call1(KILN_OP("matmul_integer_to_float"), {a, a_scale, a_zero, b, b_scale, bias});
}

Tensor matmul_nbits(const Tensor& a, const Tensor& b, const Tensor& scales, const Tensor& zero_points,
                    const Tensor& bias, int64_t bits, int64_t block_size, int64_t accuracy_level) {
  return call1(KILN_OP("matmul_nbits"), {a, b, scales, zero_points, bias},
               {{"bits", bits}, {"block_size", block_size}, {"accuracy_level", accuracy_level}});
}

Tensor qlinear_conv2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero, const Tensor& weight,
                      const Tensor& w_scale, const Tensor& y_scale, const Tensor& y_zero, const Tensor& bias,
                      const ConvOptions& o) {
  return call1(KILN_OP("qlinear_conv2d"), {x, x_scale, x_zero, weight, w_scale, y_scale, y_zero, bias},
               {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}});
}

Tensor qlinear_matmul(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                      const Tensor& b_scale, const Tensor& y_scale, const Tensor& y_zero, const Tensor& bias) {
  return call1(KILN_OP("qlinear_matmul"), {a, a_scale, a_zero, b, b_scale, y_scale, y_zero, bias});
}

}  // namespace kiln

// The integer kernels: qlinear_conv2d, qlinear_matmul and
// qlinear_batch_matmul against the exact
// integer arithmetic, over the geometries models use; and quantized models
// in the QDQ form, whose Conv, MatMul and Gemm groups run on those kernels,
// against ONNX Runtime on the same files. ctest runs these tests a second
// time with oneDNN held to AVX2 (no VNNI), where 8-bit weights take the
// plain integer loop and 7-bit ones oneDNN's AVX2 kernels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/onednn_int8.h"
#include "backends/cpu/quantize_layout.h"
#include "io/onnx_tensor.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/error_message.h"
#include "support/onnx_builder.h"
#include "support/ort_reference.h"
#include "support/requantized.h"

namespace kt = kiln::testing;
using kt::expect_requantized_equal;
using kt::random_quantized;
using kt::requantized;
using namespace kiln;
using ::onnx::TensorProto;

namespace {

Tensor scalar(float v) { return from_vector<float>({v}, {}); }

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, pad, dilation, groups;
  DType x, y;
  bool per_channel, bias;
};

TEST(Int8Kernels, ConvolutionsAreExactIntegerArithmetic) {
  const std::vector<ConvCase> cases = {
      {2, 8, 12, 12, 16, 3, 1, 1, 1, 1, DType::UInt8, DType::UInt8, true, true},     // a 3x3 layer
      {1, 16, 11, 9, 8, 3, 2, 0, 1, 1, DType::Int8, DType::Int8, false, false},      // strided, odd sizes
      {1, 16, 10, 10, 16, 3, 1, 1, 1, 16, DType::UInt8, DType::UInt8, true, true},   // depthwise
      {2, 12, 7, 7, 24, 1, 1, 0, 1, 2, DType::UInt8, DType::Int8, true, true},       // 1x1, two groups
      {1, 8, 14, 14, 8, 3, 1, 2, 2, 1, DType::Int8, DType::UInt8, true, false},      // dilated
      {1, 3, 20, 20, 8, 7, 2, 3, 1, 1, DType::UInt8, DType::UInt8, true, true},      // an image stem
  };
  uint64_t seed = 10;
  // Full-range weights, and 7-bit ones (which CPUs without VNNI run on oneDNN too).
  for (const bool seven_bit : {false, true})
  for (const ConvCase& k : cases) {
    SCOPED_TRACE(::testing::Message() << "conv " << k.c << "->" << k.o << " k" << k.k << " s" << k.stride << " g"
                                      << k.groups << (seven_bit ? " 7-bit" : ""));
    const Tensor x = random_quantized({k.n, k.c, k.h, k.w}, k.x, ++seed);
    Tensor w = random_quantized({k.o, k.c / k.groups, k.k, k.k}, DType::Int8, ++seed);
    if (seven_bit) w = clamp(w, -64.0, 63.0);
    manual_seed(++seed);
    const Tensor w_scale = k.per_channel ? rand({k.o}) * 0.01 + 0.002 : scalar(0.006f);
    const Tensor bias = k.bias ? cast(round(randn({k.o}) * 3000.0), DType::Int32) : Tensor();
    const double x_zero = k.x == DType::Int8 ? -3 : 121, y_zero = k.y == DType::Int8 ? 5 : 100;
    const Tensor xz = cast(scalar_tensor(x_zero), k.x), yz = cast(scalar_tensor(y_zero), k.y);
    const float x_scale = 0.02f, y_scale = 0.35f;
    ConvOptions o;
    o.stride = {k.stride, k.stride};
    o.padding = {k.pad, k.pad};
    o.dilation = {k.dilation, k.dilation};
    o.groups = k.groups;
    const Tensor got = qlinear_conv2d(x, scalar(x_scale), xz, w, w_scale, scalar(y_scale), yz, bias, o);
    Tensor acc = conv2d(cast(x, DType::Float64) - x_zero, cast(w, DType::Float64),
                        k.bias ? cast(bias, DType::Float64) : Tensor(), o);
    const Tensor multiplier = (scalar(x_scale) * w_scale / scalar(y_scale)).reshape({k.per_channel ? k.o : 1, 1, 1});
    expect_requantized_equal(got, requantized(acc, multiplier, y_zero, k.y));
  }
}

TEST(Int8Kernels, MatrixProductsAreExactIntegerArithmetic) {
  for (const bool seven_bit : {false, true})
  for (DType a_type : {DType::UInt8, DType::Int8}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(a_type) << (seven_bit ? " 7-bit" : ""));
    const Tensor a = random_quantized({3, 5, 40}, a_type, 1);
    Tensor b = random_quantized({40, 24}, DType::Int8, 2);
    if (seven_bit) b = clamp(b, -64.0, 63.0);
    manual_seed(3);
    const Tensor b_scale = rand({24}) * 0.01 + 0.001;
    const Tensor bias = cast(round(randn({24}) * 500.0), DType::Int32);
    const double a_zero = a_type == DType::Int8 ? 7 : 130;
    const Tensor got = qlinear_matmul(a, scalar(0.05f), cast(scalar_tensor(a_zero), a_type), b, b_scale, scalar(0.9f),
                                      cast(scalar_tensor(128.0), DType::UInt8), bias);
    const Tensor acc = matmul(cast(a, DType::Float64) - a_zero, cast(b, DType::Float64)) + cast(bias, DType::Float64);
    expect_requantized_equal(got, requantized(acc, scalar(0.05f) * b_scale / scalar(0.9f), 128, DType::UInt8));
  }
}

// The product of two activations, each with its own zero point (attention's
// products), batch by batch: every pairing of uint8 and int8 operands and
// output, depths that are not whole groups of 4 (rows padded), rows past a
// tile's 12 and columns past a 32-column panel.
TEST(Int8Kernels, ProductsOfTwoActivationsAreExactIntegerArithmetic) {
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {{{2, 3, 16, 32}, {2, 3, 32, 16}},  // heads of 32
                                   {{1, 2, 13, 37}, {1, 2, 37, 40}},  // odd depth, rows and columns past a tile
                                   {{4, 7, 1}, {4, 1, 9}},            // depth 1
                                   {{30, 6}, {6, 33}}};               // no batch
  uint64_t seed = 500;
  for (const Case& c : cases)
    for (DType a_type : {DType::UInt8, DType::Int8})
      for (DType b_type : {DType::UInt8, DType::Int8})
        for (DType y_type : {DType::UInt8, DType::Int8}) {
          SCOPED_TRACE(::testing::Message() << shape_str(c.a) << " @ " << shape_str(c.b) << " " << dtype_name(a_type)
                                            << " x " << dtype_name(b_type) << " -> " << dtype_name(y_type));
          const Tensor a = random_quantized(c.a, a_type, ++seed), b = random_quantized(c.b, b_type, ++seed);
          const double a_zero = a_type == DType::Int8 ? -128 : 3, b_zero = b_type == DType::Int8 ? 17 : 255;
          const double y_zero = y_type == DType::Int8 ? -6 : 120;
          const float a_scale = 0.03f, b_scale = 0.07f, y_scale = 1.3f;
          const Tensor got = qlinear_batch_matmul(a, scalar(a_scale), cast(scalar_tensor(a_zero), a_type), b,
                                                  scalar(b_scale), cast(scalar_tensor(b_zero), b_type), scalar(y_scale),
                                                  cast(scalar_tensor(y_zero), y_type));
          const Tensor acc = matmul(cast(a, DType::Float64) - a_zero, cast(b, DType::Float64) - b_zero);
          expect_requantized_equal(
              got, requantized(acc, scalar(a_scale) * scalar(b_scale) / scalar(y_scale), y_zero, y_type));
        }
}

// A call site keeps its oneDNN arguments between calls: calls that move to
// other buffers, come back, or change a zero point each get the answer of a
// exact answer, as do two sites sharing one primitive in turn.
TEST(Int8Kernels, CallSitesRebindTheirBuffersAndZeroPoints) {
  namespace dnn = cpu::onednn;
  const ConvCase k{1, 32, 14, 14, 32, 3, 1, 1, 1, 32, DType::UInt8, DType::UInt8, true, true};  // depthwise
  const dnn::QuantizedConvCall call{{k.n, k.c, k.h, k.w, k.o, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, k.groups},
                                    false, false, true, true, true, true, true, true};
  const Tensor w = random_quantized({k.o, 1, 3, 3}, DType::Int8, 21);
  manual_seed(22);
  const std::vector<float> scales = dnn::requantization_scales(scalar(0.02f), rand({k.o}) * 0.01 + 0.002, scalar(0.3f));
  const Tensor bias = cast(round(randn({k.o}) * 2000.0), DType::Int32);
  Tensor prepared = Tensor::empty({dnn::quantized_weights_bytes(call, scales.data())}, DType::UInt8);
  ASSERT_GT(prepared.numel(), 0);
  dnn::prepare_quantized_weights(call, scales.data(), w.data<int8_t>(), prepared.raw_data());
  // The exact answer for channels-last input x and the zero points, channels-last.
  ConvOptions o;
  o.padding = {1, 1};
  o.groups = k.groups;
  const Tensor multiplier = from_vector<float>(scales, {k.o, 1, 1});
  auto exact = [&](const Tensor& x, int32_t x_zero, int32_t y_zero) {
    const Tensor acc = conv2d(cast(x.permute({0, 3, 1, 2}), DType::Float64) - x_zero, cast(w, DType::Float64),
                              cast(bias, DType::Float64), o);
    return requantized(acc, multiplier, y_zero, DType::UInt8).permute({0, 2, 3, 1}).contiguous();
  };
  Tensor x1 = random_quantized({1, 14, 14, 32}, DType::UInt8, 23), x2 = random_quantized({1, 14, 14, 32}, DType::UInt8, 24);
  Tensor y1 = Tensor::empty(x1.shape(), DType::UInt8), y2 = Tensor::empty(x1.shape(), DType::UInt8);
  dnn::PrimitiveMemo site1, site2;
  struct Step {
    Tensor* x;
    Tensor* y;
    dnn::PrimitiveMemo* site;
    int32_t x_zero, y_zero;
  };
  const std::vector<Step> steps = {{&x1, &y1, &site1, 120, 100}, {&x2, &y2, &site2, 3, 7},  {&x1, &y1, &site1, 120, 100},
                                   {&x1, &y1, &site1, 90, 140},  {&x2, &y1, &site2, 3, 7},  {&x1, &y2, &site1, 120, 100}};
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (i == 2) *s.x = random_quantized(s.x->shape(), DType::UInt8, 25);  // new contents, new buffer
    ASSERT_TRUE(dnn::quantized_conv_forward(call, s.x->raw_data(), s.x_zero, prepared.raw_data(), scales.data(),
                                            bias.data<int32_t>(), s.y_zero, s.y->raw_data(), s.site));
    SCOPED_TRACE(::testing::Message() << "step " << i);
    expect_requantized_equal(*s.y, exact(*s.x, s.x_zero, s.y_zero));
  }
}

// Weights prepared once (under one thread count, for the implementation
// timed fastest there) give the exact answer when run under other thread
// counts too, whose primitives must read the same layout; for layers where
// oneDNN has several implementations (1x1 of few channels, strided, 3x3).
TEST(Int8Kernels, PreparedWeightsRunExactlyUnderAnyThreadCount) {
  namespace dnn = cpu::onednn;
  const int threads = get_num_threads();
  struct Layer {
    int64_t c, o, k, stride, pad;
    bool x_zero;
  };
  uint64_t seed = 40;
  for (const Layer l : {Layer{16, 96, 1, 1, 0, true}, Layer{8, 16, 1, 2, 0, true}, Layer{16, 16, 3, 1, 1, false}}) {
    SCOPED_TRACE(::testing::Message() << l.c << "->" << l.o << " k" << l.k << " s" << l.stride);
    const int64_t h = 14, oh = (h + 2 * l.pad - l.k) / l.stride + 1;
    const dnn::QuantizedConvCall call{{2, l.c, h, h, l.o, l.k, l.k, oh, oh, l.stride, l.stride, l.pad, l.pad, 1, 1, 1},
                                      false, false, true, true, l.x_zero, true, true, true};
    // 7-bit weights, which oneDNN multiplies exactly without VNNI too.
    const Tensor w = clamp(random_quantized({l.o, l.c, l.k, l.k}, DType::Int8, ++seed), -64.0, 63.0);
    manual_seed(++seed);
    const std::vector<float> scales = dnn::requantization_scales(scalar(0.02f), rand({l.o}) * 0.01 + 0.002, scalar(0.3f));
    const Tensor bias = cast(round(randn({l.o}) * 2000.0), DType::Int32);
    const int32_t x_zero = l.x_zero ? 117 : 0, y_zero = 90;
    set_num_threads(2);
    Tensor prepared = Tensor::empty({dnn::quantized_weights_bytes(call, scales.data())}, DType::UInt8);
    ASSERT_GT(prepared.numel(), 0);
    dnn::prepare_quantized_weights(call, scales.data(), w.data<int8_t>(), prepared.raw_data());
    const Tensor x = random_quantized({2, h, h, l.c}, DType::UInt8, ++seed);  // channels-last
    ConvOptions o;
    o.stride = {l.stride, l.stride};
    o.padding = {l.pad, l.pad};
    const Tensor acc = conv2d(cast(x.permute({0, 3, 1, 2}), DType::Float64) - x_zero, cast(w, DType::Float64),
                              cast(bias, DType::Float64), o);
    const Tensor want = requantized(acc, from_vector<float>(scales, {l.o, 1, 1}), y_zero, DType::UInt8);
    for (const int t : {1, 2, 3}) {
      set_num_threads(t);
      Tensor y = Tensor::empty({2, oh, oh, l.o}, DType::UInt8);
      ASSERT_TRUE(dnn::quantized_conv_forward(call, x.raw_data(), x_zero, prepared.raw_data(), scales.data(),
                                              bias.data<int32_t>(), y_zero, y.raw_data()));
      SCOPED_TRACE(::testing::Message() << t << " threads");
      expect_requantized_equal(y.permute({0, 3, 1, 2}), want);
    }
  }
  set_num_threads(threads);
}

// A model's input quantized straight into channels-last memory holds what
// quantize_linear gives, pixel by pixel: one to five channels (the vector
// path takes up to four), rows not a multiple of sixteen, values past the
// range and NaN, uint8 and int8.
TEST(Int8Kernels, QuantizingIntoChannelsLastEqualsQuantizingThenPermuting) {
  for (const DType type : {DType::UInt8, DType::Int8})
  for (const int64_t c : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(type) << ", " << c << " channels");
    manual_seed(30 + c);
    Tensor x = randn({2, c, 5, 37}) * 4.0;
    x.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
    x.data<float>()[40] = 1e12f;
    x.data<float>()[41] = -1e12f;
    const Tensor zero = cast(scalar_tensor(type == DType::Int8 ? -7.0 : 121.0), type);
    const Tensor want = quantize_linear(x, scalar(0.031f), zero).permute({0, 2, 3, 1}).contiguous();
    Tensor got = Tensor::empty({2, c, 5, 37}, type);
    cpu::quantize_to_channels_last(x, 0.031f, type == DType::Int8 ? -7 : 121, got);
    const Tensor as_nhwc = Tensor::empty({2, 5, 37, c}, type);
    std::memcpy(as_nhwc.raw_data(), got.raw_data(), static_cast<size_t>(got.numel()));
    EXPECT_EQ(cast(as_nhwc, DType::Int32).to_vector<int32_t>(), cast(want, DType::Int32).to_vector<int32_t>());
  }
}

// A matrix product with prepared weights that writes float32, dequantized
// in its epilogue, gives what the quantized product and a dequantize_linear
// after it give, bit for bit; then with a vector added and a ReLU; then
// quantized again.
TEST(Int8Kernels, ADequantizingEpilogueEqualsQuantizingThenDequantizing) {
  namespace dnn = cpu::onednn;
  for (const bool y_signed : {false, true})
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(::testing::Message() << (y_signed ? "int8" : "uint8") << " output" << (bias ? ", int32 bias" : ""));
    const int64_t m = 37, k = 64, n = 48;
    const Tensor a = random_quantized({m, k}, DType::UInt8, 4), b = random_quantized({k, n}, DType::Int8, 5);
    manual_seed(6);
    const Tensor b_scale = rand({n}) * 0.01 + 0.001, vector = randn({n});
    const Tensor bias_values = cast(round(randn({n}) * 300.0), DType::Int32);
    const float y_scale = 0.37f;
    const int32_t a_zero = 131, y_zero = y_signed ? -5 : 119;
    const std::vector<float> scales = dnn::requantization_scales(scalar(0.05f), b_scale, scalar(y_scale));
    dnn::QuantizedMatmulCall call{m, k, n, false, y_signed, true, bias, true, {}};
    Tensor prepared = Tensor::empty({dnn::quantized_matmul_weights_bytes(call, scales.data())}, DType::UInt8);
    dnn::prepare_quantized_matmul_weights(call, scales.data(), b.data<int8_t>(), prepared.raw_data());
    Tensor q = Tensor::empty({m, n}, y_signed ? DType::Int8 : DType::UInt8);
    ASSERT_TRUE(dnn::quantized_matmul(call, a.raw_data(), a_zero, prepared.raw_data(), scales.data(),
                                      bias ? bias_values.data<int32_t>() : nullptr, y_zero, q.raw_data()));
    const Tensor zero = cast(scalar_tensor(static_cast<double>(y_zero)), q.dtype());
    const Tensor want = dequantize_linear(q, scalar(y_scale), zero);
    const Tensor residual = randn({m, n});
    for (const bool add_relu : {false, true}) {
      // With the vector and the ReLU, a residual added between them too.
      dnn::QuantizedMatmulCall f = call;
      f.dequantized = {true, y_scale, y_zero, add_relu, add_relu};
      f.dequantized.add_residual = add_relu;
      Tensor own = Tensor::empty({dnn::quantized_matmul_weights_bytes(f, scales.data())}, DType::UInt8);
      ASSERT_GT(own.numel(), 0);
      dnn::prepare_quantized_matmul_weights(f, scales.data(), b.data<int8_t>(), own.raw_data());
      Tensor got = Tensor::empty({m, n});
      ASSERT_TRUE(dnn::quantized_matmul(f, a.raw_data(), a_zero, own.raw_data(), scales.data(),
                                        bias ? bias_values.data<int32_t>() : nullptr, y_zero, got.raw_data(),
                                        add_relu ? vector.data<float>() : nullptr,
                                        add_relu ? residual.data<float>() : nullptr));
      const Tensor expected = add_relu ? relu(want + vector + residual) : want;
      const auto g = got.to_vector<float>(), e = expected.contiguous().to_vector<float>();
      size_t equal = 0;
      for (size_t i = 0; i < g.size(); ++i) equal += g[i] == e[i];
      EXPECT_EQ(equal, g.size()) << (add_relu ? "with the vector, the residual and the ReLU" : "dequantized")
                                 << ": element 0 "
                                 << g[0] << " vs " << e[0];
      // Quantized again (for the next product), into either 8-bit type:
      // what quantize_linear gives on that float result, bit for bit.
      for (const bool q_signed : {false, true}) {
        dnn::QuantizedMatmulCall r = f;
        r.dequantized.requantize = true;
        r.dequantized.q_scale = 0.023f;
        r.dequantized.q_zero = q_signed ? 3 : 77;
        r.dequantized.q_signed = q_signed;
        Tensor rw = Tensor::empty({dnn::quantized_matmul_weights_bytes(r, scales.data())}, DType::UInt8);
        ASSERT_GT(rw.numel(), 0);
        dnn::prepare_quantized_matmul_weights(r, scales.data(), b.data<int8_t>(), rw.raw_data());
        Tensor requantized = Tensor::empty({m, n}, q_signed ? DType::Int8 : DType::UInt8);
        ASSERT_TRUE(dnn::quantized_matmul(r, a.raw_data(), a_zero, rw.raw_data(), scales.data(),
                                          bias ? bias_values.data<int32_t>() : nullptr, y_zero, requantized.raw_data(),
                                          add_relu ? vector.data<float>() : nullptr,
                                          add_relu ? residual.data<float>() : nullptr));
        const Tensor q_zero = cast(scalar_tensor(q_signed ? 3.0 : 77.0), requantized.dtype());
        EXPECT_EQ(cast(requantized, DType::Int32).to_vector<int32_t>(),
                  cast(quantize_linear(expected, scalar(0.023f), q_zero), DType::Int32).to_vector<int32_t>())
            << (q_signed ? "int8" : "uint8") << " requantized";
      }
    }
  }
}

// A model's answer compiled (with the kernels its second run ran, by name)
// and from the graph without passes (optimization level 1).
struct CompiledAndPlain {
  Tensor got, want;
  std::vector<std::string> kernels;
};
CompiledAndPlain compiled_and_plain(const std::string& path, const Tensor& x) {
  SessionOptions plain;
  plain.optimization_level = 1;
  CompiledAndPlain r;
  r.want = InferenceSession(path, plain).run({x})[0];
  InferenceSession session(path);
  session.run({x});
  profiler::start();
  r.got = session.run({x})[0];
  profiler::stop();
  for (const auto& record : profiler::records()) r.kernels.push_back(record.name);
  return r;
}

// Equal within one step of the output's quantization.
void expect_within_one_step(const CompiledAndPlain& r, double step) {
  const auto g = r.got.to_vector<float>(), w = r.want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], step * 1.001) << "element " << i;
}

// x [8, 16] quantized, times int8 weights [16, 12] (per column), the
// product quantized and dequantized and a float bias added, into "biased":
// the layout `kiln quantize` writes for a linear layer.
void qdq_biased_product(kt::OnnxBuilder& b) {
  b.io(true, "x", TensorProto::FLOAT, {8, 16});
  b.init("x_scale", scalar(0.03f));
  b.init("x_zero", from_vector<uint8_t>({120}, {}));
  b.init("y_scale", scalar(0.2f));
  b.init("y_zero", from_vector<uint8_t>({100}, {}));
  b.init("w", clamp(random_quantized({16, 12}, DType::Int8, 8), -64.0, 63.0));  // exact without VNNI too
  manual_seed(9);
  b.init("w_scale", rand({12}) * 0.01 + 0.002);
  b.init("w_zero", zeros({12}, DType::Int8));
  b.init("bias", randn({12}));
  b.node("QuantizeLinear", {"x", "x_scale", "x_zero"}, {"x_q"});
  b.node("DequantizeLinear", {"x_q", "x_scale", "x_zero"}, {"x_dq"});
  kt::OnnxBuilder::integer(b.node("DequantizeLinear", {"w", "w_scale", "w_zero"}, {"w_dq"}), "axis", 1);
  b.node("MatMul", {"x_dq", "w_dq"}, {"y"});
  b.node("QuantizeLinear", {"y", "y_scale", "y_zero"}, {"y_q"});
  b.node("DequantizeLinear", {"y_q", "y_scale", "y_zero"}, {"y_dq"});
  b.node("Add", {"y_dq", "bias"}, {"biased"});
}

// qdq_biased_product and the ReLU, into `out`. With `residual`, that float
// [8, 12] value is added before the ReLU (a residual block's second layer).
void qdq_linear_layer(kt::OnnxBuilder& b, const std::string& out, const std::string& residual = "") {
  qdq_biased_product(b);
  if (!residual.empty()) b.node("Add", {residual, "biased"}, {"summed"});
  b.node("Relu", {residual.empty() ? "biased" : "summed"}, {out});
}

// The layout `kiln quantize` writes for a linear layer: the product's
// output quantized and dequantized, the bias added and the ReLU applied in
// float after it. The compiled graph runs the product, the dequantization,
// the bias and the ReLU as one kernel (no dequantize_linear of its own), with
// the answer of the graph without passes.
TEST(Int8Kernels, ALinearLayersDequantizationBiasAndReluRunInItsEpilogue) {
  kt::OnnxBuilder b;
  qdq_linear_layer(b, "out");
  b.io(false, "out", TensorProto::FLOAT, {8, 12});
  manual_seed(10);
  const CompiledAndPlain run = compiled_and_plain(b.save("qdq_linear.onnx"), randn({8, 16}) * 2.0);
  const std::vector<std::string>& names = run.kernels;
  EXPECT_NE(std::find(names.begin(), names.end(), "qlinear_matmul (int8, weights prepared) + dequantize + add + relu"),
            names.end()) << ::testing::PrintToString(names);
  EXPECT_EQ(std::find(names.begin(), names.end(), "dequantize_linear"), names.end()) << ::testing::PrintToString(names);
  expect_within_one_step(run, 0.2);
}

// A residual block's second linear layer: the product dequantized, its
// bias added, then the block's input added back (a float value the graph
// made earlier), then the ReLU. The product's kernel adds the residual in
// its epilogue (no add of its own), with the answer of the graph without
// passes.
TEST(Int8Kernels, AResidualAddedAfterALinearLayerRunsInItsEpilogue) {
  kt::OnnxBuilder b;
  manual_seed(11);
  b.init("skip_w", randn({16, 12}));
  b.node("MatMul", {"x", "skip_w"}, {"skip"});  // a float value made before the product runs
  qdq_linear_layer(b, "out", "skip");
  b.io(false, "out", TensorProto::FLOAT, {8, 12});
  manual_seed(12);
  const CompiledAndPlain run = compiled_and_plain(b.save("qdq_residual.onnx"), randn({8, 16}) * 2.0);
  const std::vector<std::string>& names = run.kernels;
  EXPECT_NE(std::find(names.begin(), names.end(),
                      "qlinear_matmul (int8, weights prepared) + dequantize + add + residual + relu"),
            names.end())
      << ::testing::PrintToString(names);
  EXPECT_EQ(std::find(names.begin(), names.end(), "add"), names.end()) << ::testing::PrintToString(names);
  expect_within_one_step(run, 0.2);
}

// An attention layer's output projection in a sequence-first encoder: the
// product dequantized and its bias added, then made batch-first ([L, E] to
// [L, 1, E] to [1, L, E]: views that keep the memory order) before the
// layer's input is added back. The views and the add join the product's
// epilogue. A transpose that moves the rows (there are two sequences) keeps
// its add.
TEST(Int8Kernels, AResidualAddedAfterViewsThatKeepTheOrderRunsInTheEpilogue) {
  for (const bool moves_rows : {false, true}) {
    SCOPED_TRACE(moves_rows ? "rows moved" : "order kept");
    const Shape viewed = moves_rows ? Shape{4, 2, 12} : Shape{8, 1, 12}, added = {viewed[1], viewed[0], 12};
    kt::OnnxBuilder b;
    manual_seed(12);
    b.init("skip_w", randn({16, 12}));
    b.init("viewed", from_vector<int64_t>(viewed, {3}));
    b.init("added", from_vector<int64_t>(added, {3}));
    b.node("MatMul", {"x", "skip_w"}, {"skip"});  // the layer's input, made before the product runs
    b.node("Reshape", {"skip", "added"}, {"skip_3d"});
    qdq_biased_product(b);
    b.node("Reshape", {"biased", "viewed"}, {"sequence_first"});
    kt::OnnxBuilder::ints(b.node("Transpose", {"sequence_first"}, {"batch_first"}), "perm", {1, 0, 2});
    b.node("Add", {"skip_3d", "batch_first"}, {"out"});
    b.io(false, "out", TensorProto::FLOAT, added);
    manual_seed(13);
    const CompiledAndPlain run = compiled_and_plain(b.save("qdq_projection.onnx"), randn({8, 16}) * 2.0);
    const std::vector<std::string>& names = run.kernels;
    const bool folded =
        std::find(names.begin(), names.end(),
                  "qlinear_matmul (int8, weights prepared) + dequantize + add + residual") != names.end();
    EXPECT_EQ(folded, !moves_rows) << ::testing::PrintToString(names);
    EXPECT_EQ(std::find(names.begin(), names.end(), "add") != names.end(), moves_rows)
        << ::testing::PrintToString(names);
    expect_within_one_step(run, 0.2);
  }
}

// A transformer's feed-forward layer as `kiln quantize` writes it: the
// first product's float result (bias, ReLU) quantized again for the second.
// The first product's kernel writes the 8-bit input of the second (no
// quantize_linear of its own), with the answer of the graph without passes.
TEST(Int8Kernels, AFeedForwardLayersFirstProductWritesTheSecondsInput) {
  kt::OnnxBuilder b;
  qdq_linear_layer(b, "h");
  b.init("h_scale", scalar(0.05f));
  b.init("h_zero", from_vector<uint8_t>({3}, {}));
  b.init("w2", clamp(random_quantized({12, 6}, DType::Int8, 9), -64.0, 63.0));
  manual_seed(11);
  b.init("w2_scale", rand({6}) * 0.01 + 0.002);
  b.init("w2_zero", zeros({6}, DType::Int8));
  kt::OnnxBuilder::integer(b.node("DequantizeLinear", {"w2", "w2_scale", "w2_zero"}, {"w2_dq"}), "axis", 1);
  b.node("QuantizeLinear", {"h", "h_scale", "h_zero"}, {"h_q"});
  b.node("DequantizeLinear", {"h_q", "h_scale", "h_zero"}, {"h_dq"});
  b.node("MatMul", {"h_dq", "w2_dq"}, {"z"});
  b.node("QuantizeLinear", {"z", "y_scale", "y_zero"}, {"z_q"});
  b.node("DequantizeLinear", {"z_q", "y_scale", "y_zero"}, {"out"});
  b.io(false, "out", TensorProto::FLOAT, {8, 6});
  manual_seed(12);
  const CompiledAndPlain run = compiled_and_plain(b.save("qdq_feed_forward.onnx"), randn({8, 16}) * 2.0);
  const std::vector<std::string>& names = run.kernels;
  const std::string first = "qlinear_matmul (int8, weights prepared) + dequantize + add + relu + quantize";
  EXPECT_NE(std::find(names.begin(), names.end(), first), names.end()) << ::testing::PrintToString(names);
  EXPECT_EQ(std::count(names.begin(), names.end(), "quantize_linear"), 1) << ::testing::PrintToString(names);
  expect_within_one_step(run, 0.2);
}

TEST(Int8Kernels, BadOperandsSayWhatIsWrong) {
  const Tensor x = zeros({1, 4, 5, 5}, DType::UInt8), w = zeros({2, 4, 3, 3}, DType::Int8);
  const Tensor z8 = zeros({}, DType::UInt8);
  EXPECT_NE(kt::message_of([&] { qlinear_conv2d(x, scalar(1), z8, cast(w, DType::UInt8), scalar(1), scalar(1), z8); })
                .find("weights must be int8 (symmetric)"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { qlinear_conv2d(x, scalar(1), zeros({}, DType::Int8), w, scalar(1), scalar(1), z8); })
                .find("zero point is int8 but the input is uint8"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { qlinear_conv2d(x, scalar(1), z8, w, ones({3}), scalar(1), z8); })
                .find("one per output channel (2)"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { qlinear_conv2d(x, scalar(1), z8, w, scalar(1), scalar(1), z8, zeros({2})); })
                .find("bias must be int32 [2]"),
            std::string::npos);
  const Tensor a = zeros({2, 4, 8}, DType::UInt8), b = zeros({3, 8, 5}, DType::Int8), zb = zeros({}, DType::Int8);
  EXPECT_NE(kt::message_of([&] {
              qlinear_batch_matmul(a, scalar(1), z8, b, scalar(1), zb, scalar(1), z8);
            }).find("must share their batch dimensions and K, got [2, 4, 8] @ [3, 8, 5]"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] {
              qlinear_batch_matmul(a, scalar(1), z8, zeros({2, 8, 5}, DType::Int8), scalar(1), z8, scalar(1), z8);
            }).find("each zero point must have its operand's dtype, got uint8 for uint8 a and uint8 for int8 b"),
            std::string::npos);
}

// A small CNN in the QDQ form as ONNX Runtime's quantize_static writes it:
// uint8 activations with a QuantizeLinear/DequantizeLinear pair on every
// tensor, int8 weights per output channel, int32 biases in the scale of
// input x weight; a 3x3 convolution with its ReLU, global pooling, a 1x1
// convolution whose ReLU the output's zero point does not imply (so it
// stays), and a classifier as Gemm (transB) and as MatMul.
TEST(Int8Kernels, QdqModelRunsOnIntegerKernelsAndMatchesOnnxRuntime) {
  kt::OnnxBuilder b;
  b.io(true, "image", TensorProto::FLOAT, {2, 3, 16, 16});
  auto qdq = [&](const std::string& value, const std::string& params) {
    b.node("QuantizeLinear", {value, params + "_scale", params + "_zero"}, {value + "_q"});
    b.node("DequantizeLinear", {value + "_q", params + "_scale", params + "_zero"}, {value + "_dq"});
    return value + "_dq";
  };
  auto params = [&](const std::string& name, float scale, int zero) {
    b.init(name + "_scale", scalar(scale));
    b.init(name + "_zero", from_vector<uint8_t>({static_cast<uint8_t>(zero)}, {}));
  };
  auto weights = [&](const std::string& name, const Shape& shape, int axis, float in_scale, uint64_t seed, bool bias) {
    manual_seed(seed);
    const int64_t channels = shape[static_cast<size_t>(axis)];
    const Tensor scale = rand({channels}) * 0.004 + 0.002;
    b.init(name, cast(round(clamp(randn(shape) * 30.0, -127.0, 127.0)), DType::Int8));
    b.init(name + "_scale", scale);
    b.init(name + "_zero", zeros({channels}, DType::Int8));
    auto* dq = b.node("DequantizeLinear", {name, name + "_scale", name + "_zero"}, {name + "_dq"});
    kt::OnnxBuilder::integer(dq, "axis", axis);
    if (!bias) return;
    b.init(name + "_bias", cast(round(randn({channels}) * 400.0), DType::Int32));
    b.init(name + "_bias_scale", scale * in_scale);
    b.init(name + "_bias_zero", zeros({channels}, DType::Int32));
    auto* bias_dq = b.node("DequantizeLinear", {name + "_bias", name + "_bias_scale", name + "_bias_zero"}, {name + "_bias_dq"});
    kt::OnnxBuilder::integer(bias_dq, "axis", 0);
  };
  params("in", 0.016f, 128);
  params("c1", 0.03f, 0);
  params("c2", 0.02f, 10);
  params("pool", 0.01f, 3);
  params("logits", 0.05f, 120);
  weights("w1", {8, 3, 3, 3}, 0, 0.016f, 1, true);
  weights("w2", {6, 8, 1, 1}, 0, 0.03f, 2, true);
  weights("fc", {5, 6}, 0, 0.01f, 3, true);
  weights("proj", {6, 4}, 1, 0.01f, 4, false);
  auto* c1 = b.node("Conv", {qdq("image", "in"), "w1_dq", "w1_bias_dq"}, {"conv1"});
  kt::OnnxBuilder::ints(c1, "pads", {1, 1, 1, 1});
  kt::OnnxBuilder::ints(c1, "strides", {2, 2});
  b.node("Relu", {"conv1"}, {"relu1"});
  b.node("Conv", {qdq("relu1", "c1"), "w2_dq", "w2_bias_dq"}, {"conv2"});
  b.node("Relu", {"conv2"}, {"relu2"});
  b.node("GlobalAveragePool", {qdq("relu2", "c2")}, {"pooled"});
  b.node("Flatten", {qdq("pooled", "pool")}, {"flat"});
  auto* gemm = b.node("Gemm", {qdq("flat", "pool"), "fc_dq", "fc_bias_dq"}, {"logits"});
  kt::OnnxBuilder::integer(gemm, "transB", 1);
  b.node("MatMul", {"flat_dq", "proj_dq"}, {"projected"});
  b.io(false, qdq("logits", "logits"), TensorProto::FLOAT, {2, 5});
  b.node("QuantizeLinear", {"projected", "logits_scale", "logits_zero"}, {"projected_q"});
  b.io(false, "projected_q", TensorProto::UINT8, {2, 4});
  b.io(false, "relu2_q", TensorProto::UINT8, {2, 6, 8, 8});
  const std::string path = b.save("qdq_cnn.onnx");

  InferenceSession session(path);
  EXPECT_EQ(session.rewrites(), "1 Conv, 1 MatMul, 1 Gemm, 1 average pool, 1 Reshape/Flatten/Transpose on int8 kernels");
  manual_seed(5);
  const Tensor image = rand({2, 3, 16, 16}) * 4.0 - 2.0;
  const auto out = session.run({image});
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  const auto ort = kt::run_ort(path, {{"image", image}});
  for (size_t i = 0; i < out.size(); ++i) {
    SCOPED_TRACE(ort.outputs[i].first);
    const double step = i == 0 ? 0.05 : 1.0;
    const auto a = cast(out[i], DType::Float64).contiguous().to_vector<double>();
    const auto r = cast(ort.outputs[i].second, DType::Float64).contiguous().to_vector<double>();
    ASSERT_EQ(a.size(), r.size());
    size_t equal = 0;
    for (size_t j = 0; j < a.size(); ++j) {
      EXPECT_LE(std::fabs(a[j] - r[j]), step * 1.0001) << "element " << j;
      equal += a[j] == r[j];
    }
    EXPECT_GE(equal, a.size() * 97 / 100);
  }
}

}  // namespace

namespace {

// A clip after a layer (ReLU6) goes into the integer layer when the
// output's quantized values all lie within its bounds, and stays otherwise.
TEST(Int8Kernels, ClipJoinsTheLayerOnlyWhenTheOutputRangeImpliesIt) {
  for (const float upper : {6.0f, 2.0f}) {
    kt::OnnxBuilder b;
    b.io(true, "x", TensorProto::FLOAT, {1, 4, 6, 6});
    b.init("s", scalar(0.05f));
    b.init("z", from_vector<uint8_t>({128}, {}));
    b.init("w", cast(round(clamp(randn({4, 4, 3, 3}) * 30.0, -127.0, 127.0)), DType::Int8));
    b.init("w_scale", scalar(0.01f));
    b.init("w_zero", zeros({}, DType::Int8));
    if (upper == 6.0f) {  // bounds as torch.onnx.export writes them: Constant nodes
      for (const auto& [name, value] : {std::pair{"lo", 0.0f}, std::pair{"hi", upper}}) {
        auto* c = b.node("Constant", {}, {name});
        auto* a = c->add_attribute();
        a->set_name("value");
        a->set_type(::onnx::AttributeProto::TENSOR);
        onnx_io::to_proto(scalar(value), *a->mutable_t());
      }
    } else {
      b.init("lo", scalar(0.0f));
      b.init("hi", scalar(upper));
    }
    b.init("y_scale", scalar(6.0f / 255));  // the output holds [0, 6]
    b.init("y_zero", from_vector<uint8_t>({0}, {}));
    b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
    b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
    b.node("DequantizeLinear", {"w", "w_scale", "w_zero"}, {"wd"});
    b.node("Conv", {"xd", "wd"}, {"c"});
    b.node("Clip", {"c", "lo", "hi"}, {"clipped"});
    b.node("QuantizeLinear", {"clipped", "y_scale", "y_zero"}, {"yq"});
    b.io(false, "yq", TensorProto::UINT8, {1, 4, 4, 4});
    InferenceSession session = InferenceSession::from_bytes(b.m.SerializeAsString(), {}, "clip.onnx");
    EXPECT_EQ(session.rewrites(), upper == 6.0f ? "1 Conv on int8 kernels" : "") << upper;
    manual_seed(3);
    const auto y = cast(session.run({randn({1, 4, 6, 6}) * 3.0})[0], DType::Float32);
    // The clip holds either way: nothing above its bound.
    EXPECT_LE(amax(y, {}, false).item<float>() * 6.0f / 255, upper + 1e-5f);
  }
}

}  // namespace

namespace {

// Quantizing rounds x / scale half to even, adds the zero point and
// saturates, for every value (the vector loop and its tail alike): halves,
// values past the range, infinities, and NaN (to the lowest value).
TEST(Int8Kernels, QuantizingRoundsHalfToEvenAndSaturatesEveryValue) {
  std::vector<float> x = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, 127.5f, 254.5f, 255.5f, -127.5f, -128.5f, 1e30f,
                          -1e30f, 3e9f, -3e9f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  manual_seed(4);
  for (float v : randn({45}).to_vector<float>()) x.push_back(v * 200);
  const Tensor t = from_vector<float>(x, {static_cast<int64_t>(x.size())});
  for (const auto& [zero, signed_type] : std::vector<std::pair<int, bool>>{{0, false}, {128, false}, {0, true}, {-5, true}}) {
    const Tensor z = signed_type ? from_vector<int8_t>({static_cast<int8_t>(zero)}, {})
                                 : from_vector<uint8_t>({static_cast<uint8_t>(zero)}, {});
    const Tensor q = cast(quantize_linear(t, scalar(1.0f), z), DType::Float64);
    const double lo = signed_type ? -128 : 0, hi = signed_type ? 127 : 255;
    const auto got = q.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::isnan(x[i]) ? lo : std::clamp(std::nearbyint(std::clamp<double>(x[i], -4e9, 4e9)) + zero, lo, hi);
      EXPECT_EQ(got[i], want) << x[i] << " with zero point " << zero;
    }
  }
}

TEST(Int8Kernels, SumsAreDequantizedAddedAndRequantized) {
  for (DType t : {DType::UInt8, DType::Int8}) {
    const Tensor a = random_quantized({2, 3, 5, 7}, t, 1), b = random_quantized({2, 3, 5, 7}, t, 2);
    const double za = t == DType::Int8 ? -5 : 120, zb = t == DType::Int8 ? 9 : 131;
    const Tensor got = qlinear_add(a, scalar(0.04f), cast(scalar_tensor(za), t), b, scalar(0.07f), cast(scalar_tensor(zb), t),
                                   scalar(0.09f), from_vector<uint8_t>({17}, {}));
    const Tensor real = (cast(a, DType::Float64) - za) * 0.04 + (cast(b, DType::Float64) - zb) * 0.07;
    expect_requantized_equal(got, requantized(real, scalar(1.0f / 0.09f), 17, DType::UInt8));
  }
  EXPECT_NE(kt::message_of([] {
              const Tensor a = zeros({2, 3}, DType::UInt8), z = zeros({}, DType::UInt8);
              qlinear_add(a, scalar(1), z, zeros({3}, DType::UInt8), scalar(1), z, scalar(1), z);
            }).find("one shape (no broadcasting)"),
            std::string::npos);
}

}  // namespace

namespace {

TEST(Int8Kernels, EmptyBatchesGiveEmptyOutputs) {
  const Tensor z = zeros({}, DType::UInt8);
  EXPECT_EQ(qlinear_conv2d(zeros({0, 2, 5, 5}, DType::UInt8), scalar(1), z, zeros({3, 2, 3, 3}, DType::Int8), scalar(1),
                           scalar(1), z)
                .shape(),
            (Shape{0, 3, 3, 3}));
  EXPECT_EQ(qlinear_matmul(zeros({0, 4}, DType::UInt8), scalar(1), z, zeros({4, 2}, DType::Int8), scalar(1), scalar(1), z)
                .shape(),
            (Shape{0, 2}));
  EXPECT_EQ(qlinear_add(zeros({0, 3}, DType::UInt8), scalar(1), z, zeros({0, 3}, DType::UInt8), scalar(1), z, scalar(1), z)
                .shape(),
            (Shape{0, 3}));
}

}  // namespace

namespace {

// A max pool between a dequantize and a quantize of the same parameters pools
// the quantized values (the maximum commutes with dequantizing); with other
// parameters on its output it stays in float.
TEST(Int8Kernels, MaxPoolOfOneScaleRunsOnTheQuantizedValues) {
  for (const float out_scale : {0.05f, 0.04f}) {
    kt::OnnxBuilder b;
    b.io(true, "x", TensorProto::FLOAT, {1, 3, 9, 9});
    b.init("s", scalar(0.05f));
    b.init("z", from_vector<uint8_t>({100}, {}));
    b.init("s_out", scalar(out_scale));
    b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
    b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
    auto* pool = b.node("MaxPool", {"xd"}, {"p"});
    kt::OnnxBuilder::ints(pool, "kernel_shape", {3, 3});
    kt::OnnxBuilder::ints(pool, "strides", {2, 2});
    kt::OnnxBuilder::ints(pool, "pads", {1, 1, 1, 1});
    b.node("QuantizeLinear", {"p", "s_out", "z"}, {"pq"});
    b.io(false, "pq", TensorProto::UINT8, {1, 3, 5, 5});
    const std::string path = b.save(out_scale == 0.05f ? "qdq_pool.onnx" : "qdq_pool_rescaled.onnx");
    InferenceSession session(path);
    EXPECT_EQ(session.rewrites(), out_scale == 0.05f ? "1 MaxPool on int8 kernels" : "") << out_scale;
    manual_seed(4);
    const Tensor x = randn({1, 3, 9, 9}) * 2.0;
    const Tensor got = session.run({x})[0];
    if (!kt::ort_available()) continue;
    EXPECT_EQ(got.to_vector<uint8_t>(), kt::run_ort(path, {{"x", x}}).outputs[0].second.to_vector<uint8_t>()) << out_scale;
  }
}

}  // namespace

namespace {

// Dequantized (float64), as the reference computes on.
Tensor real_of(const Tensor& q, double scale, double zero) { return (cast(q, DType::Float64) - zero) * scale; }

TEST(Int8Kernels, ConcatenationsRequantizeEachOperandToTheOutputsParameters) {
  for (DType t : {DType::UInt8, DType::Int8}) {
    const double za = t == DType::Int8 ? -3 : 128, zb = t == DType::Int8 ? 7 : 100, zy = t == DType::Int8 ? 1 : 120;
    const Tensor a = random_quantized({2, 3, 4, 5}, t, 1), b = random_quantized({2, 2, 4, 5}, t, 2);
    auto zero = [&](double z) { return cast(scalar_tensor(z), t); };
    // b already in the output's parameters: copied as it is.
    const Tensor got = qlinear_concat({{a, scalar(0.05f), zero(za)}, {b, scalar(0.08f), zero(zy)}, {b, scalar(0.06f), zero(zb)}},
                                      scalar(0.08f), zero(zy));
    ASSERT_EQ(got.shape(), (Shape{2, 7, 4, 5}));
    // In float32, as dequantizing and quantizing again computes (ONNX Runtime's QDQ path).
    auto real32 = [](const Tensor& q, float scale, double zero) {
      return (cast(q, DType::Float32) - scalar_tensor(zero)) * scalar(scale);
    };
    const Tensor real = concat({real32(a, 0.05f, za), real32(b, 0.08f, zy), real32(b, 0.06f, zb)}, 1);
    const Tensor want = cast(clamp(round(real / scalar(0.08f)) + zy,
                                   t == DType::Int8 ? -128 : 0, t == DType::Int8 ? 127 : 255),
                             t);
    expect_requantized_equal(got, want);
    EXPECT_EQ(cast(got.slice(1, 3, 5), DType::Float64).contiguous().to_vector<double>(),
              cast(b, DType::Float64).to_vector<double>());
    // Along another axis.
    const Tensor rows = qlinear_concat({{a, scalar(0.05f), zero(za)}, {a, scalar(0.05f), zero(za)}}, scalar(0.05f), zero(za), 0);
    EXPECT_EQ(rows.shape(), (Shape{4, 3, 4, 5}));
    EXPECT_EQ(cast(rows, DType::Float64).to_vector<double>(), cast(concat({a, a}, 0), DType::Float64).to_vector<double>());
  }
  const Tensor z = zeros({}, DType::UInt8);
  EXPECT_NE(kt::message_of([&] {
              qlinear_concat({{zeros({1, 2, 3}, DType::UInt8), scalar(1), z}, {zeros({1, 2, 4}, DType::UInt8), scalar(1), z}},
                             scalar(1), z, 1);
            }).find("may differ along axis 1 only"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] {
              qlinear_concat({{zeros({1, 2}, DType::UInt8), scalar(1), z}, {zeros({1, 2}, DType::Int8), scalar(1), z}},
                             scalar(1), z, 1);
            }).find("must be uint8"),
            std::string::npos);
}

TEST(Int8Kernels, AveragePoolsAverageTheDequantizedValues) {
  for (DType t : {DType::UInt8, DType::Int8})
    for (bool count_pad : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (count_pad ? " counting padding" : ""));
      const double zx = t == DType::Int8 ? -4 : 130, zy = t == DType::Int8 ? 3 : 110;
      const Tensor x = random_quantized({2, 3, 9, 8}, t, 5);
      auto zero = [&](double z) { return cast(scalar_tensor(z), t); };
      const Tensor got = qlinear_avg_pool2d(x, scalar(0.04f), zero(zx), scalar(0.03f), zero(zy), {3, 3}, {2, 2}, {1, 1}, count_pad);
      const Tensor real = avg_pool2d(real_of(x, 0.04f, zx), {3, 3}, {2, 2}, {1, 1}, count_pad);
      const double lo = t == DType::Int8 ? -128 : 0, hi = t == DType::Int8 ? 127 : 255;
      expect_requantized_equal(got, cast(clamp(round(real / static_cast<double>(0.03f)) + zy, lo, hi), t));
      // The whole plane as the window: a global average pool.
      const Tensor global = qlinear_avg_pool2d(x, scalar(0.04f), zero(zx), scalar(0.03f), zero(zy), {9, 8});
      EXPECT_EQ(global.shape(), (Shape{2, 3, 1, 1}));
      expect_requantized_equal(
          global, cast(clamp(round(mean(real_of(x, 0.04f, zx), {2, 3}, true) / static_cast<double>(0.03f)) + zy, lo, hi), t));
    }
}

// Concat, AveragePool and GlobalAveragePool (with a Flatten before its
// QuantizeLinear) between DequantizeLinear and QuantizeLinear nodes run on
// the integer kernels, in graph mode channels-last between int8
// convolutions, and agree with ONNX Runtime on the same file.
TEST(Int8Kernels, QdqConcatenationsAndAveragePoolsRunOnIntegerKernels) {
  kt::OnnxBuilder b;
  b.io(true, "image", TensorProto::FLOAT, {1, 4, 12, 12});
  auto params = [&](const std::string& name, float scale, int zero) {
    b.init(name + "_scale", scalar(scale));
    b.init(name + "_zero", from_vector<uint8_t>({static_cast<uint8_t>(zero)}, {}));
  };
  auto qdq = [&](const std::string& value, const std::string& p) {
    b.node("QuantizeLinear", {value, p + "_scale", p + "_zero"}, {value + "_q"});
    b.node("DequantizeLinear", {value + "_q", p + "_scale", p + "_zero"}, {value + "_dq"});
    return value + "_dq";
  };
  auto conv = [&](const std::string& name, const std::string& in, int64_t out, int64_t channels, uint64_t seed) {
    manual_seed(seed);
    b.init(name, cast(round(clamp(randn({out, channels, 3, 3}) * 30.0, -127.0, 127.0)), DType::Int8));
    b.init(name + "_scale", scalar(0.003f));
    b.node("DequantizeLinear", {name, name + "_scale"}, {name + "_dq"});
    auto* c = b.node("Conv", {in, name + "_dq"}, {name + "_out"});
    kt::OnnxBuilder::ints(c, "pads", {1, 1, 1, 1});
    return name + "_out";
  };
  params("in", 0.02f, 128);
  params("c1", 0.03f, 100);
  params("c2", 0.025f, 90);
  params("cat", 0.03f, 100);
  params("avg", 0.02f, 110);
  params("gap", 0.015f, 120);
  const std::string x = qdq("image", "in");
  const std::string c1 = qdq(conv("w1", x, 8, 4, 1), "c1"), c2 = qdq(conv("w2", x, 8, 4, 2), "c2");
  auto* cat = b.node("Concat", {c1, c2}, {"joined"});
  kt::OnnxBuilder::integer(cat, "axis", 1);
  const std::string c3 = qdq(conv("w3", qdq("joined", "cat"), 8, 16, 3), "c1");
  auto* avg = b.node("AveragePool", {c3}, {"averaged"});
  kt::OnnxBuilder::ints(avg, "kernel_shape", {3, 3});
  kt::OnnxBuilder::ints(avg, "strides", {2, 2});
  kt::OnnxBuilder::ints(avg, "pads", {1, 1, 1, 1});
  const std::string c4 = qdq(conv("w4", qdq("averaged", "avg"), 8, 8, 4), "c2");
  b.node("GlobalAveragePool", {c4}, {"pooled"});
  b.node("Flatten", {"pooled"}, {"flat"});
  b.node("QuantizeLinear", {"flat", "gap_scale", "gap_zero"}, {"flat_q"});
  b.io(false, "flat_q", TensorProto::UINT8, {1, 8});
  const std::string path = b.save("qdq_concat_pool.onnx");

  InferenceSession session(path);
  EXPECT_EQ(session.rewrites(), "4 Conv, 1 Concat, 2 average pool on int8 kernels");
  manual_seed(8);
  const Tensor image = rand({1, 4, 12, 12}) * 4.0 - 2.0;
  const Tensor got = session.run({image})[0];
  ASSERT_EQ(got.shape(), (Shape{1, 8}));
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  const auto want = cast(kt::run_ort(path, {{"image", image}}).outputs[0].second, DType::Float64).to_vector<double>();
  const auto have = cast(got, DType::Float64).to_vector<double>();
  for (size_t i = 0; i < have.size(); ++i) EXPECT_LE(std::fabs(have[i] - want[i]), 1.0) << "element " << i;
}

}  // namespace

namespace {

// Quantizing rounds x / scale half to even, shifts and saturates; dequantizing
// is (q - zero) * scale: the values ONNX's QuantizeLinear and
// DequantizeLinear define, in one pass each.
TEST(Int8Kernels, QuantizeAndDequantizeAreTheOnnxFormulas) {
  const float scale = 0.5f;
  // Ties either way, values past both ends, and a random run long enough for the vector loop.
  std::vector<float> xs = {0.25f, 0.75f, -0.25f, -0.75f, 1.25f, 300.0f, -300.0f, 63.75f, -64.25f};
  manual_seed(3);
  for (float v : (randn({1000}) * 40.0).to_vector<float>()) xs.push_back(v);
  const Tensor x = from_vector<float>(xs, {static_cast<int64_t>(xs.size())});
  for (DType t : {DType::UInt8, DType::Int8}) {
    const double zero = t == DType::Int8 ? -3 : 128;
    const Tensor z = cast(scalar_tensor(zero), t);
    const Tensor q = quantize_linear(x, scalar(scale), z);
    const double lo = t == DType::Int8 ? -128 : 0, hi = t == DType::Int8 ? 127 : 255;
    const Tensor want = cast(clamp(round(x / scalar(scale)) + zero, lo, hi), t);
    EXPECT_EQ(cast(q, DType::Float64).to_vector<double>(), cast(want, DType::Float64).to_vector<double>()) << dtype_name(t);
    const Tensor back = dequantize_linear(q, scalar(scale), z);
    EXPECT_EQ(back.dtype(), DType::Float32);
    EXPECT_EQ(back.to_vector<float>(), ((cast(q, DType::Float32) - zero) * scalar(scale)).to_vector<float>());
  }
  EXPECT_NE(kt::message_of([&] { quantize_linear(x, scalar(scale), zeros({}, DType::Int32)); }).find("uint8 or int8"),
            std::string::npos);
}

}  // namespace

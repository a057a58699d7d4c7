// Kiln's own int8 tiles (int8_gemm, on CPUs with AVX-512 VNNI): products
// of uint8 and int8 rows against the exact integer arithmetic over shapes
// that cross every edge of a tile (rows past 12, the 16- and 32-column
// panels, depths of one group of 4 and of hundreds), their dequantizing
// epilogue against the ops it stands for, bit for bit; the depthwise
// kernel and the stems' implicit GEMM against the exact arithmetic; and a QDQ model whose layers run on
// them against the same model computed op by op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/int8_depthwise.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/int8_patch_conv.h"
#include "backends/cpu/onednn_int8.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/onnx_builder.h"
#include "support/requantized.h"

namespace kt = kiln::testing;
using kt::expect_requantized_equal;
using kt::random_quantized;
using kt::requantized;
using namespace kiln;
using ::onnx::TensorProto;
namespace tiles = kiln::cpu::int8_gemm;

namespace {

Tensor scalar(float v) { return from_vector<float>({v}, {}); }

Tensor packed(const Tensor& b) {  // b [k, n] int8
  const int64_t k = b.shape()[0], n = b.shape()[1];
  Tensor p = Tensor::empty({tiles::packed_bytes(k, n)}, DType::UInt8);
  tiles::pack(b.data<int8_t>(), k, n, n, 1, p.raw_data());
  return p;
}

struct Product {
  int64_t m, k, n;
};

class Int8Tiles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!tiles::available()) GTEST_SKIP() << "this build has no int8 tiles (they need AVX-512 VNNI)";
  }
};

// (a - a_zero) b + bias, times the float32 scale, rounded half to even,
// plus the zero point, saturated: equal to the exact answer but where the
// float32 rounding of a product within a step of a half goes the other way.
TEST_F(Int8Tiles, ProductsAreExactIntegerArithmetic) {
  const std::vector<Product> shapes = {{0, 8, 16},  {1, 4, 1},    {7, 16, 16},   {12, 16, 17},   {13, 20, 32},
                                       {37, 64, 33}, {130, 24, 48}, {25, 256, 100}, {3, 1024, 24}};
  uint64_t seed = 100;
  for (const Product& p : shapes)
    for (const bool a_signed : {false, true})
      for (const bool y_signed : {false, true})
        for (const bool per_column : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << p.m << "x" << p.k << "x" << p.n << (a_signed ? " int8 in" : " uint8 in")
                       << (y_signed ? ", int8 out" : ", uint8 out") << (per_column ? ", per column" : ", per tensor"));
          const Tensor a = random_quantized({p.m, p.k}, a_signed ? DType::Int8 : DType::UInt8, ++seed);
          const Tensor b = random_quantized({p.k, p.n}, DType::Int8, ++seed);
          manual_seed(++seed);
          const Tensor scale = per_column ? rand({p.n}) * 2e-5 + 1e-5 : scalar(1.7e-5f);
          const Tensor bias = cast(round(randn({p.n}) * 3000.0), DType::Int32);
          const int32_t a_zero = a_signed ? -9 : 119, y_zero = y_signed ? -4 : 101;
          Tensor y = Tensor::empty({p.m, p.n}, y_signed ? DType::Int8 : DType::UInt8);
          tiles::Call c;
          c.m = p.m, c.k = p.k, c.n = p.n, c.lda = p.k, c.ldy = p.n;
          c.scales = scale.data<float>(), c.per_column = per_column, c.bias = bias.data<int32_t>();
          c.a_signed = a_signed, c.a_zero = a_zero, c.y_zero = y_zero, c.y_signed = y_signed;
          tiles::run(c, a.raw_data(), packed(b).raw_data(), y.raw_data());
          const Tensor acc =
              matmul(cast(a, DType::Float64) - a_zero, cast(b, DType::Float64)) + cast(bias, DType::Float64);
          expect_requantized_equal(y, requantized(acc, scale, y_zero, y.dtype()));
        }
}

// Scales (or biases) so large that products pass the float-to-int32
// conversion's range: those outputs saturate to the end their sign points at.
TEST_F(Int8Tiles, ProductsPastInt32SaturateToTheRightEnd) {
  const int64_t m = 5, k = 8, n = 20;
  const Tensor a = random_quantized({m, k}, DType::UInt8, 1), b = random_quantized({k, n}, DType::Int8, 2);
  const Tensor scale = scalar(1e6f);
  Tensor y = Tensor::empty({m, n}, DType::UInt8);
  tiles::Call c;
  c.m = m, c.k = k, c.n = n, c.lda = k, c.ldy = n, c.scales = scale.data<float>(), c.a_zero = 0, c.y_zero = 0;
  tiles::run(c, a.raw_data(), packed(b).raw_data(), y.raw_data());
  const auto acc = matmul(cast(a, DType::Float64), cast(b, DType::Float64)).contiguous().to_vector<double>();
  const auto got = cast(y, DType::Float64).contiguous().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], acc[i] > 0 ? 255.0 : 0.0) << "element " << i;
  // One scale (2) for every column, and one column's bias (1.5e9) alone
  // taking its products past 2^31: that column saturates high, the others
  // are the plain requantization.
  std::vector<int32_t> biases(static_cast<size_t>(n), 0);
  biases[13] = 1500000000;
  const Tensor bias = from_vector<int32_t>(biases, {n}), two = scalar(2.0f);
  c.scales = two.data<float>(), c.bias = bias.data<int32_t>();
  tiles::run(c, a.raw_data(), packed(b).raw_data(), y.raw_data());
  const auto biased = cast(y, DType::Float64).contiguous().to_vector<double>();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const double sum = acc[static_cast<size_t>(r * n + j)], want = j == 13 ? 255.0 : std::clamp(2 * sum, 0.0, 255.0);
      EXPECT_EQ(biased[static_cast<size_t>(r * n + j)], want) << "row " << r << ", column " << j;
    }
}

// The dequantized result, then a vector, a residual and a ReLU added, then
// quantized again: what the quantized product and the ops after it give,
// bit for bit, at shapes with tails.
TEST_F(Int8Tiles, TheDequantizingEpilogueEqualsTheOpsItStandsFor) {
  const Product p{29, 36, 50};
  const Tensor a = random_quantized({p.m, p.k}, DType::UInt8, 11), b = random_quantized({p.k, p.n}, DType::Int8, 12);
  manual_seed(13);
  const Tensor b_scale = rand({p.n}) * 0.01 + 0.001, vector = randn({p.n}), residual = randn({p.m, p.n});
  const Tensor bias = cast(round(randn({p.n}) * 300.0), DType::Int32);
  const float a_scale = 0.05f, y_scale = 0.37f;
  const int32_t a_zero = 131, y_zero = 119;
  const Tensor scales = scalar(a_scale) * b_scale / scalar(y_scale);
  const Tensor pb = packed(b);
  tiles::Call c;
  c.m = p.m, c.k = p.k, c.n = p.n, c.lda = p.k, c.ldy = p.n;
  c.scales = scales.data<float>(), c.per_column = true, c.bias = bias.data<int32_t>();
  c.a_zero = a_zero, c.y_zero = y_zero;
  Tensor q = Tensor::empty({p.m, p.n}, DType::UInt8);
  tiles::run(c, a.raw_data(), pb.raw_data(), q.raw_data());
  const Tensor y_zero_t = from_vector<uint8_t>({static_cast<uint8_t>(y_zero)}, {});
  const Tensor expected = relu(dequantize_linear(q, scalar(y_scale), y_zero_t) + vector + residual);
  c.dequantized.on = true, c.dequantized.y_scale = y_scale, c.dequantized.y_zero = y_zero;
  c.dequantized.add_vector = c.dequantized.add_residual = c.dequantized.relu = true;
  c.vector = vector.data<float>(), c.residual = residual.data<float>();
  Tensor got = Tensor::empty({p.m, p.n});
  tiles::run(c, a.raw_data(), pb.raw_data(), got.raw_data());
  EXPECT_EQ(got.to_vector<float>(), expected.contiguous().to_vector<float>());
  for (const bool q_signed : {false, true}) {
    c.dequantized.requantize = true, c.dequantized.q_scale = 0.023f, c.dequantized.q_zero = q_signed ? 3 : 77;
    c.dequantized.q_signed = q_signed;
    Tensor requantized = Tensor::empty({p.m, p.n}, q_signed ? DType::Int8 : DType::UInt8);
    tiles::run(c, a.raw_data(), pb.raw_data(), requantized.raw_data());
    const Tensor q_zero = cast(scalar_tensor(q_signed ? 3.0 : 77.0), requantized.dtype());
    EXPECT_EQ(cast(requantized, DType::Int32).to_vector<int32_t>(),
              cast(quantize_linear(expected, scalar(0.023f), q_zero), DType::Int32).to_vector<int32_t>())
        << (q_signed ? "int8" : "uint8") << " requantized";
  }
}

// Depthwise convolutions on Kiln's depthwise kernel against the exact
// integer arithmetic: channels in groups of 64, in blocks of 16 and both,
// strides 1 and 2, with and without padding, kernels of 1 to 4 rows and up
// to 5 columns, uint8 and int8 inputs and results.
TEST_F(Int8Tiles, DepthwiseConvolutionsAreExactIntegerArithmetic) {
  namespace dw = cpu::int8_depthwise;
  struct Case {
    int64_t c, h, w, kh, kw, stride, ph, pw;
  };
  const std::vector<Case> cases = {{64, 9, 11, 3, 3, 1, 1, 1},  {16, 7, 7, 3, 3, 2, 1, 1}, {80, 6, 13, 3, 3, 1, 0, 0},
                                   {144, 8, 8, 3, 3, 2, 1, 1},  {32, 5, 9, 2, 5, 1, 1, 2}, {64, 4, 6, 1, 1, 1, 0, 0},
                                   {128, 10, 10, 4, 3, 2, 2, 1}};
  uint64_t seed = 200;
  for (const Case& k : cases)
    for (const bool x_signed : {false, true})
      for (const bool y_signed : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << k.c << " channels " << k.h << "x" << k.w << " kernel " << k.kh << "x" << k.kw << " stride "
                     << k.stride << " pad " << k.ph << "," << k.pw << (x_signed ? ", int8 in" : ", uint8 in")
                     << (y_signed ? ", int8 out" : ", uint8 out"));
        const int64_t n = 2, oh = (k.h + 2 * k.ph - k.kh) / k.stride + 1, ow = (k.w + 2 * k.pw - k.kw) / k.stride + 1;
        const Tensor x =
            random_quantized({n, k.h, k.w, k.c}, x_signed ? DType::Int8 : DType::UInt8, ++seed);  // channels-last
        const Tensor w = random_quantized({k.c, 1, k.kh, k.kw}, DType::Int8, ++seed);
        manual_seed(++seed);
        const Tensor scale = rand({k.c}) * 0.004 + 0.001;
        const Tensor bias = cast(round(randn({k.c}) * 2000.0), DType::Int32);
        const int32_t x_zero = x_signed ? -7 : 121, y_zero = y_signed ? 3 : 97;
        const dw::Geometry g{n, k.c, k.h, k.w, k.kh, k.kw, oh, ow, k.stride, k.stride, k.ph, k.pw};
        ASSERT_TRUE(dw::takes(g));
        Tensor packed = Tensor::empty({dw::packed_bytes(g)}, DType::UInt8);
        dw::pack(g, w.data<int8_t>(), packed.raw_data());
        Tensor y = Tensor::empty({n, oh, ow, k.c}, y_signed ? DType::Int8 : DType::UInt8);
        const dw::Requantization q{scale.data<float>(), true, bias.data<int32_t>(), x_signed, x_zero, y_zero, y_signed};
        dw::run(g, q, x.raw_data(), packed.raw_data(), y.raw_data());
        ConvOptions o;
        o.stride = {k.stride, k.stride};
        o.padding = {k.ph, k.pw};
        o.groups = k.c;
        const Tensor acc = conv2d(cast(x.permute({0, 3, 1, 2}), DType::Float64) - x_zero, cast(w, DType::Float64),
                                  cast(bias, DType::Float64), o);
        expect_requantized_equal(y,
                                 requantized(acc, scale.reshape({k.c, 1, 1}), y_zero, y.dtype()).permute({0, 2, 3, 1}));
      }
}

// Convolutions of few input channels as an implicit GEMM over the padded
// image (int8_patch_conv) against the exact integer arithmetic: 1 to 4
// channels, kernels of 1 to 7 columns whose rows fill whole groups of 4 or
// not, strides 1 and 2, padding that reaches past the image and windows
// that leave its last columns unread, rows dilated, output rows that do not
// fill a tile, 8- and 40-column outputs (a 16-column panel's tail), uint8
// and int8 inputs and results.
TEST_F(Int8Tiles, StemConvolutionsAreExactIntegerArithmetic) {
  namespace patches = cpu::int8_patch_conv;
  struct Case {
    int64_t c, h, w, o, kh, kw, stride, ph, pw, dh;
  };
  const std::vector<Case> cases = {{3, 23, 29, 16, 7, 7, 2, 3, 3, 1}, {1, 28, 28, 8, 3, 3, 1, 1, 1, 1},
                                   {3, 17, 20, 40, 3, 3, 2, 1, 1, 1}, {4, 9, 11, 24, 5, 5, 1, 0, 2, 1},
                                   {2, 8, 8, 8, 3, 3, 2, 0, 0, 1},    {3, 12, 10, 32, 3, 1, 1, 2, 0, 2}};
  uint64_t seed = 300;
  for (const Case& k : cases)
    for (const bool x_signed : {false, true})
      for (const bool y_signed : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << k.c << " channels " << k.h << "x" << k.w << " to " << k.o << ", kernel " << k.kh << "x" << k.kw
                     << " stride " << k.stride << " pad " << k.ph << "," << k.pw << " row dilation " << k.dh
                     << (x_signed ? ", int8 in" : ", uint8 in") << (y_signed ? ", int8 out" : ", uint8 out"));
        const int64_t n = 2, oh = (k.h + 2 * k.ph - (k.kh - 1) * k.dh - 1) / k.stride + 1,
                      ow = (k.w + 2 * k.pw - k.kw) / k.stride + 1;
        const cpu::onednn::ConvShape s{n,  k.c,      k.h,      k.w,  k.o,  k.kh, k.kw, oh,
                                       ow, k.stride, k.stride, k.ph, k.pw, k.dh, 1,    1};
        ASSERT_TRUE(patches::takes(s));
        const Tensor x = random_quantized({n, k.h, k.w, k.c}, x_signed ? DType::Int8 : DType::UInt8, ++seed);
        const Tensor w = random_quantized({k.o, k.c, k.kh, k.kw}, DType::Int8, ++seed);
        manual_seed(++seed);
        const Tensor scale = rand({k.o}) * 0.004 + 0.001;
        const Tensor bias = cast(round(randn({k.o}) * 2000.0), DType::Int32);
        const int32_t x_zero = x_signed ? -7 : 121, y_zero = y_signed ? 3 : 97;
        Tensor packed_weights = Tensor::empty({patches::packed_bytes(s)}, DType::UInt8);
        patches::pack(s, w.data<int8_t>(), packed_weights.raw_data());
        tiles::Call q;
        q.scales = scale.data<float>(), q.per_column = true, q.bias = bias.data<int32_t>();
        q.a_signed = x_signed, q.a_zero = x_zero, q.y_zero = y_zero, q.y_signed = y_signed;
        Tensor y = Tensor::empty({n, oh, ow, k.o}, y_signed ? DType::Int8 : DType::UInt8);
        patches::run(s, q, x.raw_data(), packed_weights.raw_data(), y.raw_data());
        ConvOptions o;
        o.stride = {k.stride, k.stride};
        o.padding = {k.ph, k.pw};
        o.dilation = {k.dh, 1};
        const Tensor acc = conv2d(cast(x.permute({0, 3, 1, 2}), DType::Float64) - x_zero, cast(w, DType::Float64),
                                  cast(bias, DType::Float64), o);
        expect_requantized_equal(y,
                                 requantized(acc, scale.reshape({k.o, 1, 1}), y_zero, y.dtype()).permute({0, 2, 3, 1}));
      }
}

// The depthwise kernel under one scale (2) for every channel, with one
// channel's bias (1.5e9) alone taking its sums past 2^31: that channel
// saturates high, the others are the plain requantization.
TEST_F(Int8Tiles, DepthwiseSumsPastInt32SaturateToTheRightEnd) {
  namespace dw = cpu::int8_depthwise;
  const int64_t c = 16, h = 4, w = 5;
  const Tensor x = random_quantized({1, h, w, c}, DType::UInt8, 61),
               weights = random_quantized({c, 1, 3, 3}, DType::Int8, 62);
  std::vector<int32_t> biases(static_cast<size_t>(c), 0);
  biases[13] = 1500000000;
  const Tensor bias = from_vector<int32_t>(biases, {c}), two = scalar(2.0f);
  const dw::Geometry g{1, c, h, w, 3, 3, h, w, 1, 1, 1, 1};
  Tensor packed_taps = Tensor::empty({dw::packed_bytes(g)}, DType::UInt8);
  dw::pack(g, weights.data<int8_t>(), packed_taps.raw_data());
  Tensor y = Tensor::empty({1, h, w, c}, DType::UInt8);
  dw::run(g, {two.data<float>(), false, bias.data<int32_t>(), false, 0, 0, false}, x.raw_data(), packed_taps.raw_data(),
          y.raw_data());
  ConvOptions o;
  o.padding = {1, 1};
  o.groups = c;
  const Tensor acc = conv2d(cast(x.permute({0, 3, 1, 2}), DType::Float64), cast(weights, DType::Float64), Tensor(), o);
  const auto sums = acc.permute({0, 2, 3, 1}).contiguous().to_vector<double>();
  const auto got = cast(y, DType::Float64).contiguous().to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = i % c == 13 ? 255.0 : std::clamp(2 * sums[i], 0.0, 255.0);
    EXPECT_EQ(got[i], want) << "element " << i << ", channel " << i % c;
  }
}

// A QDQ model of a 3x3 convolution, a 1x1 one of 24 channels to 48, a
// depthwise 3x3 one and another 3x3, with uint8 and with int8 activations:
// the first (3 channels) and the 1x1, between channels-last layers, run on
// the tiles, and the
// depthwise one on Kiln's depthwise kernel where its input is int8; the
// model's output is the one its ops give one by one, within one step of its
// quantization.
TEST_F(Int8Tiles, ChannelsLastLayersOfAQdqModelRunOnThem) {
  if (!cpu::onednn::int8_isa_is_avx512_vnni())
    GTEST_SKIP() << "oneDNN's instruction set here is not AVX-512 VNNI (AMX, or ONEDNN_MAX_CPU_ISA holds it lower): "
                    "graph mode leaves int8 layers to oneDNN";
  for (const bool int8_activations : {false, true}) {
    SCOPED_TRACE(int8_activations ? "int8 activations" : "uint8 activations");
    kt::OnnxBuilder b;
    b.io(true, "image", TensorProto::FLOAT, {1, 3, 15, 15});
    auto qdq = [&](const std::string& value, float scale, int zero) {
      b.init(value + "_scale", scalar(scale));
      b.init(value + "_zero", int8_activations ? from_vector<int8_t>({static_cast<int8_t>(zero - 128)}, {})
                                               : from_vector<uint8_t>({static_cast<uint8_t>(zero)}, {}));
      b.node("QuantizeLinear", {value, value + "_scale", value + "_zero"}, {value + "_q"});
      b.node("DequantizeLinear", {value + "_q", value + "_scale", value + "_zero"}, {value + "_dq"});
      return value + "_dq";
    };
    auto weights = [&](const std::string& name, const Shape& shape, uint64_t seed) {
      manual_seed(seed);
      b.init(name, cast(round(clamp(randn(shape) * 30.0, -127.0, 127.0)), DType::Int8));
      b.init(name + "_scale", rand({shape[0]}) * 0.004 + 0.002);
      b.init(name + "_zero", zeros({shape[0]}, DType::Int8));
      auto* dq = b.node("DequantizeLinear", {name, name + "_scale", name + "_zero"}, {name + "_dq"});
      kt::OnnxBuilder::integer(dq, "axis", 0);
      return name + "_dq";
    };
    auto* c1 = b.node("Conv", {qdq("image", 0.016f, 128), weights("w1", {24, 3, 3, 3}, 1)}, {"c1"});
    kt::OnnxBuilder::ints(c1, "pads", {1, 1, 1, 1});
    b.node("Conv", {qdq("c1", 0.03f, 120), weights("w2", {48, 24, 1, 1}, 2)}, {"c2"});
    auto* c3 = b.node("Conv", {qdq("c2", 0.05f, 125), weights("w3", {48, 1, 3, 3}, 3)}, {"c3"});
    kt::OnnxBuilder::ints(c3, "pads", {1, 1, 1, 1});
    kt::OnnxBuilder::integer(c3, "group", 48);
    auto* c4 = b.node("Conv", {qdq("c3", 0.08f, 126), weights("w4", {8, 48, 3, 3}, 4)}, {"c4"});
    kt::OnnxBuilder::ints(c4, "pads", {1, 1, 1, 1});
    b.io(false, qdq("c4", 0.2f, 128), TensorProto::FLOAT, {1, 8, 15, 15});
    const std::string path = b.save("qdq_tiles.onnx");

    manual_seed(5);
    const Tensor image = rand({1, 3, 15, 15}) * 4.0 - 2.0;
    SessionOptions plain;
    plain.optimization_level = 1;
    const Tensor want = InferenceSession(path, plain).run({image})[0];
    InferenceSession session(path);
    session.run({image});  // (the first run traces, eagerly)
    profiler::start();
    const Tensor got = session.run({image})[0];
    profiler::stop();
    // Which kernel ran a layer, its prepared weights' size says: the tiles'
    // packing of the 1x1's [48, 24], the depthwise kernel's of its taps.
    std::vector<std::string> convs;
    for (const auto& r : profiler::records())
      if (r.name.rfind("qlinear_conv2d", 0) == 0) convs.push_back(r.name + ": " + r.shapes);
    auto layers_with = [&](int64_t bytes) {
      const std::string weights = "uint8[" + std::to_string(bytes) + "]";
      return std::count_if(convs.begin(), convs.end(),
                           [&](const std::string& c) { return c.find(weights) != std::string::npos; });
    };
    EXPECT_EQ(layers_with(tiles::packed_bytes(24, 48)), 1) << ::testing::PrintToString(convs);
    const cpu::onednn::ConvShape stem{1, 3, 15, 15, 24, 3, 3, 15, 15, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_EQ(layers_with(cpu::int8_patch_conv::packed_bytes(stem)), 1) << ::testing::PrintToString(convs);
    const cpu::int8_depthwise::Geometry depthwise{1, 48, 15, 15, 3, 3, 15, 15, 1, 1, 1, 1};
    EXPECT_EQ(layers_with(cpu::int8_depthwise::packed_bytes(depthwise)), int8_activations ? 1 : 0)
        << ::testing::PrintToString(convs);
    const auto g = got.to_vector<float>(), w = want.contiguous().to_vector<float>();
    ASSERT_EQ(g.size(), w.size());
    size_t equal = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_LE(std::fabs(g[i] - w[i]), 0.2 * 1.0001) << "element " << i;
      equal += g[i] == w[i];
    }
    EXPECT_GE(equal, g.size() * 97 / 100);
  }
}

}  // namespace

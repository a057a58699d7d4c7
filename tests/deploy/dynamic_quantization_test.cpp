// Dynamically quantized products (onnxruntime's quantize_dynamic): the
// matmul_integer_to_float op against the exact integer arithmetic, and a
// quantize_dynamic'd model rewritten onto it, against ONNX Runtime's answer.
// ctest runs the Int8Kernels tests again with oneDNN held to AVX2, where the
// op takes its plain integer loop.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <string>

#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/requantized.h"

using kiln::testing::random_quantized;
using namespace kiln;

namespace {

// Every shape a tile meets (depth 1, depths that are not a multiple of 4,
// rows past a 12-row tile, columns past a 32-column panel), uint8 and int8
// a, one weight scale or one per column, with and without a bias: the int32
// sums, times a_scale * b_scale, plus the bias, in one rounding (a fused
// multiply-add), equal to the last bit.
TEST(Int8Kernels, DynamicallyQuantizedProductsAreExactIntegerArithmetic) {
  struct Case {
    Shape a;
    int64_t n;
  };
  const std::vector<Case> cases = {{{1, 1}, 5}, {{13, 6}, 33}, {{2, 7, 32}, 16}, {{3, 37}, 40}, {{25, 64}, 70}};
  uint64_t seed = 900;
  for (const Case& c : cases)
    for (DType a_type : {DType::UInt8, DType::Int8})
      for (bool per_column : {false, true})
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << shape_str(c.a) << " x " << c.n << " " << dtype_name(a_type)
                       << (per_column ? " per column" : " one scale") << (with_bias ? " with bias" : ""));
          const int64_t k = c.a.back();
          const Tensor a = random_quantized(c.a, a_type, ++seed), b = random_quantized({k, c.n}, DType::Int8, ++seed);
          const int32_t a_zero = a_type == DType::Int8 ? -5 : 131;
          const float a_scale = 0.0173f;
          manual_seed(++seed);
          const Tensor b_scale = per_column ? rand({c.n}) * 0.01 + 0.001 : full({}, 0.0042);
          const Tensor bias = with_bias ? randn({c.n}) : Tensor();
          const Tensor got =
              matmul_integer_to_float(a, full({}, a_scale), cast(full({}, a_zero), a_type), b, b_scale, bias);
          ASSERT_EQ(got.dtype(), DType::Float32);
          Shape ys = c.a;
          ys.back() = c.n;
          ASSERT_EQ(got.shape(), ys);
          const Tensor acc =
              matmul(cast(a, DType::Float64) - static_cast<double>(a_zero), cast(b, DType::Float64)).reshape({-1, c.n});
          const std::vector<double> sums = acc.contiguous().to_vector<double>();
          const std::vector<float> bs = b_scale.reshape({-1}).contiguous().to_vector<float>();
          const std::vector<float> bv = with_bias ? bias.contiguous().to_vector<float>() : std::vector<float>();
          const std::vector<float> y = got.contiguous().to_vector<float>();
          for (size_t i = 0; i < y.size(); ++i) {
            const size_t j = i % static_cast<size_t>(c.n);
            const float scale = a_scale * bs[per_column ? j : 0];
            const float want = std::fma(static_cast<float>(sums[i]), scale, with_bias ? bv[j] : 0.0f);
            ASSERT_EQ(y[i], want) << "element " << i;
          }
        }
}

// DynamicQuantizeLinear as ONNX defines it, in float32: the range holds 0,
// scale = range / 255, zero point = round(-min / scale) half to even, then
// saturate(round(x / scale) + zero point); over lengths that leave a tail
// past the eight-lane loop, inputs all of one sign, and a long tensor split
// across the threads.
TEST(Int8Kernels, DynamicQuantizeLinearIsOnnxsDefinition) {
  struct Case {
    int64_t n;
    double shift;
  };
  for (const Case& c : std::vector<Case>{{1, 0}, {7, 0.3}, {8, 0}, {9, -2}, {100003, 0.5}, {50000, 4}, {4096, -4}}) {
    SCOPED_TRACE(::testing::Message() << c.n << " values shifted by " << c.shift);
    manual_seed(static_cast<uint64_t>(c.n));
    const Tensor x = randn({c.n}) + c.shift;
    const std::vector<Tensor> got = dynamic_quantize_linear(x);
    const std::vector<float> v = x.to_vector<float>();
    float lo = 0.0f, hi = 0.0f;
    for (float f : v) lo = std::min(lo, f), hi = std::max(hi, f);
    const float scale = (hi - lo) / 255.0f;
    const float zero = std::clamp(std::nearbyint(-lo / scale), 0.0f, 255.0f);
    ASSERT_EQ(got[1].item<float>(), scale);
    ASSERT_EQ(got[2].dtype(), DType::UInt8);
    ASSERT_EQ(static_cast<float>(got[2].item<uint8_t>()), zero);
    const std::vector<uint8_t> y = got[0].to_vector<uint8_t>();
    for (size_t i = 0; i < v.size(); ++i)
      ASSERT_EQ(static_cast<float>(y[i]), std::clamp(std::nearbyint(v[i] / scale) + zero, 0.0f, 255.0f)) << i;
  }
}

// Bad operands are refused with the rule they break.
TEST(Int8Kernels, DynamicallyQuantizedProductsCheckTheirOperands) {
  const Tensor a = random_quantized({2, 8}, DType::UInt8, 1), b = random_quantized({8, 4}, DType::Int8, 2);
  const Tensor one = full({}, 0.1), zero = zeros({}, DType::UInt8);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              matmul_integer_to_float(a, one, zero, random_quantized({6, 4}, DType::Int8, 3), one);
            }).find("must share K"),
            std::string::npos);
  EXPECT_NE(message([&] { matmul_integer_to_float(a, one, zero, cast(b, DType::UInt8), one); }).find("int8 [K, N]"),
            std::string::npos);
  EXPECT_NE(message([&] { matmul_integer_to_float(a, one, zero, b, full({3}, 0.1)); }).find("one per column (4)"),
            std::string::npos);
  EXPECT_NE(message([&] { matmul_integer_to_float(a, one, zeros({}, DType::Int8), b, one); }).find("zero point"),
            std::string::npos);
}

// onnxruntime's quantize_dynamic writes each MatMul as DynamicQuantizeLinear,
// MatMulInteger, Cast and a Mul by the product of the scales (and the bias
// Add): both layers of this model become one integer product each, packed
// once in graph mode where Kiln's int8 tiles run, and the answer is ONNX
// Runtime's (tests/fixtures/onnx/contrib).
TEST(DynamicQuantization, QuantizeDynamicModelsRunOnIntegerProducts) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/contrib/contrib_quantize_dynamic_mlp";
  InferenceSession session(dir + "/model.onnx");
  EXPECT_EQ(session.rewrites(), "2 dynamically quantized MatMul on int8 kernels");
  const Tensor x = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  const Tensor want = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  session.run({x});  // (the first run traces)
  profiler::start();
  const Tensor got = session.run({x})[0];
  profiler::stop();
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<float> g = got.contiguous().to_vector<float>(), w = want.contiguous().to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::fabs(w[i])) << "element " << i;
  int products = 0;
  for (const auto& r : profiler::records()) products += r.name.rfind("matmul_integer_to_float", 0) == 0;
  EXPECT_EQ(products, 2);
}

// torch.onnx.export shares equal biases through Identity nodes: a bias
// behind one still folds into the integer product (no add runs).
TEST(DynamicQuantization, ABiasBehindAnIdentityFolds) {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/contrib/contrib_quantize_dynamic_mlp";
  ::onnx::ModelProto model;
  std::ifstream file(dir + "/model.onnx", std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&file));
  auto* graph = model.mutable_graph();
  bool renamed = false;
  for (auto& node : *graph->mutable_node())
    if (node.op_type() == "Add" && node.input(1) == "fc1_b") node.set_input(1, "fc1_b_shared"), renamed = true;
  ASSERT_TRUE(renamed) << "the fixture's first layer adds its bias fc1_b";
  ::onnx::NodeProto identity;
  identity.set_op_type("Identity");
  identity.add_input("fc1_b");
  identity.add_output("fc1_b_shared");
  graph->mutable_node()->Add(std::move(identity));
  std::rotate(graph->mutable_node()->rbegin(), graph->mutable_node()->rbegin() + 1, graph->mutable_node()->rend());
  InferenceSession session = InferenceSession::from_bytes(model.SerializeAsString());
  EXPECT_EQ(session.rewrites(), "2 dynamically quantized MatMul on int8 kernels");
  const Tensor x = load_tensor_pb(dir + "/test_data_set_0/input_0.pb");
  session.run({x});
  profiler::start();
  const Tensor got = session.run({x})[0];
  profiler::stop();
  for (const auto& r : profiler::records()) EXPECT_EQ(r.name.find("add"), std::string::npos) << r.name;
  const Tensor want = load_tensor_pb(dir + "/test_data_set_0/output_0.pb");
  const std::vector<float> g = got.contiguous().to_vector<float>(), w = want.contiguous().to_vector<float>();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::fabs(w[i])) << "element " << i;
}

}  // namespace

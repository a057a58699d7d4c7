// The CPU pass that quantizes a layer norm's rows as it makes them
// (norm_quantize.cpp): a quantized Transformer's two patterns, a norm read
// only by its quantization and that quantization's dequantization, and a
// norm read by a float add too, its quantization behind a reshape; compiled,
// every output equals the ops computed one by one, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/onnx_builder.h"

namespace kt = kiln::testing;
using namespace kiln;
using ::onnx::TensorProto;

namespace {

Tensor scalar(float v) { return from_vector<float>({v}, {}); }

TEST(NormQuantize, ALayerNormsQuantizationRunsInItsKernelBitForBit) {
  kt::OnnxBuilder b;
  b.io(true, "x", TensorProto::FLOAT, {2, 5, 48});
  manual_seed(1);
  b.init("w", rand({48}) + 0.5);
  b.init("b", randn({48}) * 0.1);
  b.init("w2", rand({48}) + 0.5);
  b.init("s", scalar(0.021f));
  b.init("z", from_vector<uint8_t>({131}, {}));
  b.init("rows", from_vector<int64_t>({10, 48}, {2}));
  auto* n1 = b.node("LayerNormalization", {"x", "w", "b"}, {"n1"});
  kt::OnnxBuilder::integer(n1, "axis", -1);
  b.node("QuantizeLinear", {"n1", "s", "z"}, {"q1"});
  b.node("DequantizeLinear", {"q1", "s", "z"}, {"d1"});
  auto* n2 = b.node("LayerNormalization", {"x", "w2"}, {"n2"});
  kt::OnnxBuilder::integer(n2, "axis", -1);
  b.node("Reshape", {"n2", "rows"}, {"n2_rows"});
  b.node("QuantizeLinear", {"n2_rows", "s", "z"}, {"q2"});
  b.node("Add", {"n2", "x"}, {"sum"});
  b.io(false, "q1", TensorProto::UINT8, {2, 5, 48});
  b.io(false, "d1", TensorProto::FLOAT, {2, 5, 48});
  b.io(false, "q2", TensorProto::UINT8, {10, 48});
  b.io(false, "sum", TensorProto::FLOAT, {2, 5, 48});
  const std::string path = b.save("norm_quantize.onnx");

  manual_seed(2);
  Tensor x = randn({2, 5, 48}) * 3.0 + 1.0;
  x.data<float>()[7] = 1e4f;  // a row with a large value: quantized past the range, saturated
  SessionOptions plain;
  plain.optimization_level = 1;
  const auto want = InferenceSession(path, plain).run({x});
  InferenceSession session(path);
  session.run({x});
  profiler::start();
  const auto got = session.run({x});
  profiler::stop();
  std::vector<std::string> kernels;
  for (const auto& r : profiler::records()) kernels.push_back(r.name);
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "layer_norm + quantize + dequantize"), kernels.end())
      << ::testing::PrintToString(kernels);
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "layer_norm + quantize"), kernels.end())
      << ::testing::PrintToString(kernels);
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "quantize_linear"), 0) << ::testing::PrintToString(kernels);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "output " << i);
    ASSERT_EQ(got[i].shape(), want[i].shape());
    EXPECT_EQ(cast(got[i], DType::Float64).contiguous().to_vector<double>(),
              cast(want[i], DType::Float64).contiguous().to_vector<double>());
  }
}

}  // namespace

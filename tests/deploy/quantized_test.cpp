// int8 tensors and quantized ONNX models: the QOperator form (QLinearConv,
// QLinearMatMul, as PyTorch and ONNX Runtime's quantizer write them) and the
// QDQ form (QuantizeLinear/DequantizeLinear around float ops, int8 weights
// per channel), checked against ONNX Runtime on the same files.
#include <gtest/gtest.h>

#include <algorithm>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/onnx_tensor.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/close.h"
#include "support/error_message.h"
#include "support/onnx_builder.h"
#include "support/ort_reference.h"
#include "support/scratch.h"

namespace kt = kiln::testing;
using namespace kiln;

namespace {

using ::onnx::TensorProto;

TEST(Int8, IsADtypeEverywhereTensorsGo) {
  EXPECT_EQ(dtype_from_name("int8"), DType::Int8);
  EXPECT_EQ(dtype_size(DType::Int8), 1u);
  EXPECT_TRUE(is_integral(DType::Int8));
  // No 16-bit integer type: int8 with uint8 computes in int32, like PyTorch's int16 but wider.
  EXPECT_EQ(promote_types(DType::Int8, DType::UInt8), DType::Int32);
  EXPECT_EQ(promote_types(DType::Int8, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Int8, DType::Float32), DType::Float32);
  Tensor x = from_vector<int8_t>({-128, -3, 0, 5, 127}, {5});
  EXPECT_EQ(cast(x, DType::Float32).to_vector<float>(), (std::vector<float>{-128, -3, 0, 5, 127}));
  EXPECT_EQ(abs(x + from_vector<int8_t>({1, 1, 1, 1, -1}, {5})).to_vector<int8_t>(),
            (std::vector<int8_t>{127, 2, 1, 6, 126}));
  EXPECT_EQ(clamp(x, -4.0, 4.0).to_vector<int8_t>(), (std::vector<int8_t>{-4, -3, 0, 4, 4}));
  EXPECT_EQ(cast(from_vector<float>({-200, -1.7f, 300}, {3}), DType::Int32).dtype(), DType::Int32);
  // Files: safetensors (I8), .npy (|i1) and ONNX tensors keep the type and the values.
  const std::string dir = kt::scratch_dir("int8_files").string();
  io::save_safetensors(dir + "/int8.safetensors", {{"w", x}});
  Tensor back = io::load_safetensors(dir + "/int8.safetensors").tensors.at(0).second;
  EXPECT_EQ(back.dtype(), DType::Int8);
  EXPECT_EQ(back.to_vector<int8_t>(), x.to_vector<int8_t>());
  io::save_npy(dir + "/int8.npy", x);
  EXPECT_EQ(io::load_npy(dir + "/int8.npy").to_vector<int8_t>(), x.to_vector<int8_t>());
  TensorProto proto;
  onnx_io::to_proto(x, proto);
  EXPECT_EQ(proto.data_type(), TensorProto::INT8);
  EXPECT_EQ(onnx_io::from_proto(proto, "t").to_vector<int8_t>(), x.to_vector<int8_t>());
  TensorProto listed;  // int32_data, as some writers store 8-bit values
  listed.set_data_type(TensorProto::INT8);
  listed.add_dims(2);
  listed.add_int32_data(-7);
  listed.add_int32_data(9);
  EXPECT_EQ(onnx_io::from_proto(listed, "t").to_vector<int8_t>(), (std::vector<int8_t>{-7, 9}));
}

using Builder = kt::OnnxBuilder;

Tensor scalar(float v) { return from_vector<float>({v}, {}); }
// Weights in 7 bits, as ONNX Runtime's quantizer makes them for x86 (its
// reduce_range): its uint8 x int8 kernels add pairs of products in 16 bits,
// which full-range weights against large activations overflow.
Tensor int8_weights(const Shape& shape, uint64_t seed) {
  manual_seed(seed);
  return cast(round(clamp(randn(shape) * 25.0, -63.0, 63.0)), DType::Int8);
}

// Kiln and ONNX Runtime agree on a quantized output: requantizing rounds half
// to even on both sides, but their accumulators differ in the last bit now
// and then, so an element may land one step away.
void expect_same_quantized(const Tensor& kiln_out, const Tensor& ort_out, double step) {
  ASSERT_EQ(kiln_out.shape(), ort_out.shape());
  auto a = cast(kiln_out, DType::Float64).contiguous().to_vector<double>();
  auto b = cast(ort_out, DType::Float64).contiguous().to_vector<double>();
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE(std::fabs(a[i] - b[i]), step * 1.0001) << "element " << i;
    equal += a[i] == b[i];
  }
  EXPECT_GE(equal, a.size() * 98 / 100) << equal << " of " << a.size() << " equal";
}

// The QOperator form: uint8 activations, int8 weights with one scale per
// output channel, int32 biases, a 3x3 convolution with padding and stride 2,
// ReLU in the quantized domain (a clipped zero point), global pooling through
// DequantizeLinear, and a QLinearMatMul classifier.
TEST(QuantizedModels, QOperatorCnnMatchesOnnxRuntime) {
  Builder b;
  b.io(true, "image", TensorProto::FLOAT, {2, 3, 16, 16});
  b.init("in_scale", scalar(0.02f));
  b.init("in_zero", from_vector<uint8_t>({128}, {}));
  b.init("w", int8_weights({8, 3, 3, 3}, 1));
  const Tensor w_scale = from_vector<float>({0.010f, 0.012f, 0.008f, 0.011f, 0.009f, 0.013f, 0.010f, 0.007f}, {8});
  b.init("w_scale", w_scale);
  b.init("w_zero", zeros({8}, DType::Int8));
  manual_seed(9);
  const Tensor bias = cast(round(randn({8}) * 200.0), DType::Int32);
  b.init("bias", bias);
  b.init("act_scale", scalar(0.05f));
  b.init("act_zero", from_vector<uint8_t>({0}, {}));  // ReLU: nothing below zero survives
  b.init("fc", int8_weights({8, 5}, 2));
  b.init("fc_scale", scalar(0.02f));
  b.init("fc_zero", from_vector<int8_t>({3}, {}));
  b.init("logit_scale", scalar(0.1f));
  b.init("logit_zero", from_vector<uint8_t>({100}, {}));
  b.node("QuantizeLinear", {"image", "in_scale", "in_zero"}, {"q"});
  auto* conv = b.node("QLinearConv", {"q", "in_scale", "in_zero", "w", "w_scale", "w_zero", "act_scale", "act_zero", "bias"},
                      {"qc"});
  Builder::ints(conv, "pads", {1, 1, 1, 1});
  Builder::ints(conv, "strides", {2, 2});
  Builder::ints(conv, "kernel_shape", {3, 3});
  b.node("DequantizeLinear", {"qc", "act_scale", "act_zero"}, {"c"});
  b.node("GlobalAveragePool", {"c"}, {"pooled"});
  b.node("Flatten", {"pooled"}, {"flat"});
  b.node("QuantizeLinear", {"flat", "act_scale", "act_zero"}, {"qf"});
  b.node("QLinearMatMul", {"qf", "act_scale", "act_zero", "fc", "fc_scale", "fc_zero", "logit_scale", "logit_zero"},
         {"qlogits"});
  b.node("DequantizeLinear", {"qlogits", "logit_scale", "logit_zero"}, {"logits"});
  b.io(false, "qc", TensorProto::UINT8, {2, 8, 8, 8});
  b.io(false, "logits", TensorProto::FLOAT, {2, 5});
  const std::string path = b.save("qoperator_cnn.onnx");
  manual_seed(3);
  Tensor image = rand({2, 3, 16, 16}) * 4.0 - 2.0;
  InferenceSession session(path);
  auto out = session.run({image});
  EXPECT_EQ(out[0].dtype(), DType::UInt8);
  // Against the float computation on the same quantized values: within the
  // rounding of the input and of one output step.
  Tensor q = clamp(round(image / 0.02) + 128.0, 0.0, 255.0) - 128.0;
  Tensor w = cast(int8_weights({8, 3, 3, 3}, 1), DType::Float32) * w_scale.reshape({8, 1, 1, 1});
  ConvOptions o;
  o.stride = {2, 2};
  o.padding = {1, 1};
  Tensor real = conv2d(q * 0.02, w, cast(bias, DType::Float32) * w_scale * 0.02, o);
  auto want = clamp(relu(real), 0.0, 255 * 0.05).contiguous().to_vector<float>();
  auto got = (cast(out[0], DType::Float32) * 0.05).contiguous().to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 0.5 * 0.05 + 1e-5) << "element " << i;
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  auto ort = kt::run_ort(path, {{"image", image}});
  expect_same_quantized(out[0], ort.outputs[0].second, 1);
  expect_same_quantized(out[1], ort.outputs[1].second, 0.1);
}

// QLinearMatMul of a computed [2, 3, 16] by uint8 weights with a zero point
// (not the symmetric int8 the weight kernels take) and of two computed
// operands with batch dimensions to broadcast ([2, 3, 16] by [1, 16, 4]):
// the integer kernels' exact answer.
TEST(QuantizedModels, QLinearMatMulOfAsymmetricOrComputedOperandsIsExact) {
  Builder b;
  b.io(true, "a", TensorProto::UINT8, {2, 3, 16});
  b.io(true, "c", TensorProto::INT8, {1, 16, 4});
  manual_seed(21);
  const Tensor w = cast(floor(rand({16, 5}) * 256), DType::UInt8);
  b.init("w", w);
  b.init("a_scale", scalar(0.04f));
  b.init("a_zero", from_vector<uint8_t>({121}, {}));
  b.init("w_scale", scalar(0.02f));
  b.init("w_zero", from_vector<uint8_t>({130}, {}));
  b.init("c_scale", scalar(0.05f));
  b.init("c_zero", from_vector<int8_t>({-7}, {}));
  b.init("y_scale", scalar(0.5f));
  b.init("y_zero", from_vector<uint8_t>({128}, {}));
  b.node("QLinearMatMul", {"a", "a_scale", "a_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero"}, {"y"});
  b.node("QLinearMatMul", {"a", "a_scale", "a_zero", "c", "c_scale", "c_zero", "y_scale", "y_zero"}, {"z"});
  b.io(false, "y", TensorProto::UINT8, {2, 3, 5});
  b.io(false, "z", TensorProto::UINT8, {2, 3, 4});
  const std::string path = b.save("qlinear_matmul_operands.onnx");
  manual_seed(22);
  const Tensor a = cast(floor(rand({2, 3, 16}) * 256), DType::UInt8);
  const Tensor c = cast(floor(rand({1, 16, 4}) * 256) - 128, DType::Int8);
  const auto out = InferenceSession(path).run(std::vector<Tensor>{a, c});
  auto exact = [](const Tensor& acc, double multiplier) {
    return cast(clamp(round(acc * multiplier) + 128, 0.0, 255.0), DType::UInt8);
  };
  const Tensor a64 = cast(a, DType::Float64) - 121;
  const Tensor want_y = exact(matmul(a64, cast(w, DType::Float64) - 130), double(0.04f * 0.02f / 0.5f));
  const Tensor want_z = exact(matmul(a64, cast(c, DType::Float64) + 7), double(0.04f * 0.05f / 0.5f));
  EXPECT_EQ(cast(out[0], DType::Float64).contiguous().to_vector<double>(),
            cast(want_y, DType::Float64).contiguous().to_vector<double>());
  EXPECT_EQ(cast(out[1], DType::Float64).contiguous().to_vector<double>(),
            cast(want_z, DType::Float64).contiguous().to_vector<double>());
}

// The QDQ form: the float graph with QuantizeLinear/DequantizeLinear pairs
// on the activations and int8 weights dequantized per output channel (axis 0),
// as ONNX Runtime's quantize_static writes it; then MatMulInteger and
// ConvInteger, whose int32 results must be exact.
TEST(QuantizedModels, QdqAndIntegerOpsMatchOnnxRuntime) {
  Builder b;
  b.io(true, "x", TensorProto::FLOAT, {1, 4, 10, 10});
  b.init("s", scalar(0.03f));
  b.init("z", from_vector<int8_t>({-5}, {}));
  b.init("w", int8_weights({6, 4, 3, 3}, 4));
  b.init("w_scale", from_vector<float>({0.01f, 0.02f, 0.015f, 0.01f, 0.005f, 0.02f}, {6}));
  b.init("w_zero", zeros({6}, DType::Int8));
  b.node("QuantizeLinear", {"x", "s", "z"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "s", "z"}, {"xd"});
  auto* dq = b.node("DequantizeLinear", {"w", "w_scale", "w_zero"}, {"wd"});
  Builder::integer(dq, "axis", 0);
  b.node("Conv", {"xd", "wd"}, {"y"});
  b.node("QuantizeLinear", {"y", "s", "z"}, {"yq"});
  b.node("DequantizeLinear", {"yq", "s", "z"}, {"out"});
  // The integer ops on the quantized input.
  b.init("wi", int8_weights({3, 4, 2, 2}, 5));
  b.init("wi_zero", from_vector<int8_t>({2}, {}));
  b.node("ConvInteger", {"xq", "wi", "z", "wi_zero"}, {"conv_int"});
  b.init("m", int8_weights({10, 7}, 6));
  b.node("Reshape", {"xq", "shape"}, {"rows"});
  b.init("shape", from_vector<int64_t>({40, 10}, {2}));
  b.node("MatMulInteger", {"rows", "m", "z"}, {"mm_int"});
  b.io(false, "out", TensorProto::FLOAT, {1, 6, 8, 8});
  b.io(false, "conv_int", TensorProto::INT32, {1, 3, 9, 9});
  b.io(false, "mm_int", TensorProto::INT32, {40, 7});
  const std::string path = b.save("qdq.onnx");
  manual_seed(7);
  Tensor x = randn({1, 4, 10, 10});
  auto out = InferenceSession(path).run({x});
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  auto ort = kt::run_ort(path, {{"x", x}});
  expect_same_quantized(out[0], ort.outputs[0].second, 0.03);
  EXPECT_TRUE(kt::all_close(out[1], ort.outputs[1].second, 0, 0));
  EXPECT_TRUE(kt::all_close(out[2], ort.outputs[2].second, 0, 0));
}

TEST(QuantizedModels, BadQuantizedInputsSayWhatIsWrong) {
  Builder b;
  b.io(true, "a", TensorProto::UINT8, {2, 3});
  b.io(true, "b", TensorProto::INT8, {3, 2});
  b.init("zero", from_vector<int8_t>({0}, {}));  // int8, but a is uint8
  b.node("MatMulInteger", {"a", "b", "zero"}, {"y"});
  b.io(false, "y", TensorProto::INT32, {2, 2});
  InferenceSession session = InferenceSession::from_bytes(b.m.SerializeAsString(), {}, "bad.onnx");
  std::string msg = kt::message_of(
      [&] { session.run(std::vector<Tensor>{zeros({2, 3}, DType::UInt8), zeros({3, 2}, DType::Int8)}); });
  EXPECT_NE(msg.find("MatMulInteger"), std::string::npos) << msg;
  EXPECT_NE(msg.find("zero point is int8 but its tensor is uint8"), std::string::npos) << msg;
}

// QDQ files laid out as ONNX Runtime's quantize_static writes them
// (tests/fixtures/onnx/qdq, made by make_qdq_fixtures.py with ONNX Runtime's
// outputs): uint8 and int8 activations, per-tensor and per-channel weights,
// ReLUs removed into the ranges, biases in int32, QDQ pairs around pools,
// reshapes and transposes, and on both operands of attention's products.
// Every Conv, MatMul, Gemm, Add, pool and move runs
// on the integer kernels, and the answer is ONNX Runtime's to one output step
// (the exact one for the int8 attention block, whose products ONNX Runtime
// computes a unit off in places: make_qdq_fixtures.py).
struct QuantizerFile {
  const char* name;
  const char* rewrites;
  int computed_products = 0;  // MatMuls of two computed operands (attention's), run as qlinear_batch_matmul
};

class OnnxRuntimeQuantizerFiles : public ::testing::TestWithParam<QuantizerFile> {};

TEST_P(OnnxRuntimeQuantizerFiles, RunOnIntegerKernelsWithOnnxRuntimesAnswer) {
  const std::string base = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/qdq/" + GetParam().name;
  ::onnx::ModelProto model;
  std::ifstream file(base + ".onnx", std::ios::binary);
  ASSERT_TRUE(model.ParseFromIstream(&file)) << base << ".onnx";
  double step = 0;
  for (const auto& init : model.graph().initializer())
    if (init.name() == "y_scale") step = onnx_io::from_proto(init, "y_scale").item<float>();
  ASSERT_GT(step, 0) << "the output's scale";
  InferenceSession session(base + ".onnx");
  EXPECT_EQ(session.rewrites(), GetParam().rewrites);
  const Tensor want = io::load_npy(base + ".output.npy");
  session.run({io::load_npy(base + ".input.npy")});  // (the first run traces, eagerly)
  profiler::start();
  const Tensor got = session.run({io::load_npy(base + ".input.npy")})[0];
  profiler::stop();
  expect_same_quantized(got, want, step);
  // Where the convolutions run channels-last (their weights prepared once:
  // not where oneDNN would compute these weights inexactly, without VNNI),
  // the global pool before the classifier reads their output as it is (its
  // one-pixel output is the same memory in either layout), and so every
  // convolution stays channels-last.
  std::vector<std::string> names;
  for (const auto& r : profiler::records()) names.push_back(r.name);
  EXPECT_EQ(std::count(names.begin(), names.end(), "qlinear_batch_matmul"), GetParam().computed_products)
      << ::testing::PrintToString(names);
  if (std::find(names.begin(), names.end(), "qlinear_conv2d (int8, channels-last)") == names.end()) return;
  EXPECT_NE(std::find(names.begin(), names.end(), "qlinear_avg_pool2d (channels-last)"), names.end())
      << ::testing::PrintToString(names);
  EXPECT_EQ(std::find(names.begin(), names.end(), "qlinear_conv2d (int8)"), names.end()) << ::testing::PrintToString(names);
}

INSTANTIATE_TEST_SUITE_P(
    QuantizedModels, OnnxRuntimeQuantizerFiles,
    ::testing::Values(
        QuantizerFile{"cnn_uint8_per_tensor",
                      "3 Conv, 1 Gemm, 1 Add, 1 MaxPool, 1 average pool, 1 Reshape/Flatten/Transpose on int8 kernels"},
        QuantizerFile{"cnn_int8_per_channel",
                      "3 Conv, 1 Gemm, 1 Add, 1 MaxPool, 1 average pool, 1 Reshape/Flatten/Transpose on int8 kernels"},
        QuantizerFile{"mlp_uint8_per_channel", "2 MatMul, 2 Add, 4 Reshape/Flatten/Transpose on int8 kernels"},
        QuantizerFile{"mlp_int8_per_tensor", "2 MatMul, 2 Add, 4 Reshape/Flatten/Transpose on int8 kernels"},
        QuantizerFile{"attention_uint8_per_channel", "6 MatMul, 8 Reshape/Flatten/Transpose on int8 kernels", 2},
        QuantizerFile{"attention_int8_per_tensor", "6 MatMul, 8 Reshape/Flatten/Transpose on int8 kernels", 2}),
    [](const ::testing::TestParamInfo<QuantizerFile>& info) { return std::string(info.param.name); });

}  // namespace

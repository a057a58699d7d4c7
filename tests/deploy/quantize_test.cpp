// Post-training quantization (kiln::quantize_model) of models exported by
// Kiln: the QDQ file it writes runs on the int8 kernels (channels-last
// between layers in graph mode), gives ONNX Runtime's answer on the same
// file, and stays close to the float model.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/onnx_tensor.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/onnx.h"
#include "kiln/quantize.h"
#include "kiln/runtime.h"
#include "runtime/quantize_observers.h"
#include "support/cli_command.h"
#include "support/error_message.h"
#include "support/ort_reference.h"
#include "support/scratch.h"

namespace kt = kiln::testing;
using namespace kiln;

namespace {

// A ResNet-8 for 28x28 images with random weights, exported with a free
// batch size, and batches of inputs in its range.
struct ResNetFixture {
  std::string model;
  std::vector<std::vector<Tensor>> batches;
  ResNetFixture() {
    manual_seed(0);
    auto net = models::make_model("resnet8");
    net->set_train(false);
    ExportOptions o;
    o.dynamic_batch = true;
    model = export_model_bytes(net, {zeros({1, 1, 28, 28})}, o);
    for (int i = 0; i < 4; ++i) batches.push_back({randn({8, 1, 28, 28})});
  }
};

// The quantization step of a quantized model's output ("output_scale"): answers one step apart agree.
float output_step(const std::string& model) {
  ::onnx::ModelProto m;
  m.ParseFromString(model);
  for (const auto& t : m.graph().initializer())
    if (t.name() == "output_scale") return onnx_io::from_proto(t, t.name()).item<float>();
  return 0;
}

size_t count_ops(const std::string& bytes, const std::string& type) {
  ::onnx::ModelProto m;
  m.ParseFromString(bytes);
  size_t n = 0;
  for (const auto& node : m.graph().node()) n += node.op_type() == type;
  return n;
}

TEST(Quantize, ResNetRunsOnInt8KernelsCloseToFloat) {
  const ResNetFixture f;
  const QuantizeResult q = quantize_model(f.model, f.batches);
  const QuantizeReport& r = q.report;
  EXPECT_EQ(r.quantized(), 10) << r.str();  // 9 convolutions and the classifier
  EXPECT_EQ(r.calibration_batches, 3);
  EXPECT_EQ(r.held_out_batches, 1);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_LT(r.outputs[0].relative_error, 0.05) << r.str();
  EXPECT_GE(r.outputs[0].top1_agreement, 0.75) << r.str();
  EXPECT_EQ(count_ops(q.model, "DequantizeLinear"), count_ops(q.model, "QuantizeLinear") + 10 + 10)
      << "one dequantizer per activation, weight and bias";

  SessionOptions eager;
  eager.optimization_level = 0;
  InferenceSession compiled = InferenceSession::from_bytes(q.model, {}, "resnet8.int8.onnx");
  InferenceSession node_by_node = InferenceSession::from_bytes(q.model, eager, "resnet8.int8.onnx");
  EXPECT_EQ(compiled.rewrites(), "9 Conv, 1 Gemm, 2 Add on int8 kernels");
  // The logits' quantization step: answers one step apart agree.
  const float step = output_step(q.model);
  ASSERT_GT(step, 0);
  const Tensor x = f.batches.back()[0];
  const Tensor a = compiled.run({x})[0], b = node_by_node.run({x})[0];
  const Tensor fl = InferenceSession::from_bytes(f.model).run({x})[0];
  // The int8 path, channels-last in graph mode, computes what it computes node by node.
  EXPECT_LE(amax(abs(a - b), {}, false).item<float>(), step * 1.001f);
  EXPECT_LT(std::sqrt(sum((a - fl) * (a - fl)).item<float>() / sum(fl * fl).item<float>()), 0.05);

  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  const std::string path = (kt::scratch_dir("quantize_resnet") / "resnet8.int8.onnx").string();
  std::ofstream(path, std::ios::binary) << q.model;
  const Tensor ort = kt::run_ort(path, {{"input", x}}).outputs.at(0).second;
  EXPECT_LE(amax(abs(a - ort), {}, false).item<float>(), step * 1.001f);
}

// torch.onnx.export shares equal constants through Identity nodes: weights
// read that way are quantized too, and the float copies leave the file.
TEST(Quantize, WeightsBehindIdentityNodesAreQuantized) {
  const ResNetFixture f;
  ::onnx::ModelProto m;
  m.ParseFromString(f.model);
  auto* g = m.mutable_graph();
  int routed = 0;
  for (auto& n : *g->mutable_node()) {
    if (n.op_type() != "Conv") continue;
    auto* id = g->add_node();
    id->set_op_type("Identity");
    id->add_input(n.input(1));
    id->add_output(n.input(1) + "_shared");
    n.set_input(1, n.input(1) + "_shared");
    ++routed;
  }
  // Identity nodes go before their readers.
  std::rotate(g->mutable_node()->begin(), g->mutable_node()->end() - routed, g->mutable_node()->end());
  const QuantizeResult q = quantize_model(m.SerializeAsString(), f.batches);
  EXPECT_EQ(q.report.quantized(), 10) << q.report.str();
  ::onnx::ModelProto out;
  out.ParseFromString(q.model);
  for (const auto& t : out.graph().initializer())
    EXPECT_FALSE(t.data_type() == ::onnx::TensorProto::FLOAT && t.dims_size() == 4) << t.name() << " is still float";
  for (const auto& n : out.graph().node()) EXPECT_NE(n.op_type(), "Identity");
}

// A stem as torchvision's ResNets have it (convolution, ReLU, a 3x3 stride-2
// max pool, convolution): the pool runs on the quantized values,
// channels-last between the convolutions in graph mode, and gives what it
// gives node by node and in ONNX Runtime.
TEST(Quantize, MaxPoolBetweenConvolutionsRunsOnQuantizedValues) {
  manual_seed(2);
  nn::Conv2dOptions pad;
  pad.padding = 1;
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Conv2d>(3, 16, 3, pad), std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(3, 2, 1),
      std::make_shared<nn::Conv2d>(16, 16, 3, pad), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dense>(16 * 6 * 6, 4)});
  net->set_train(false);
  ExportOptions eo;
  eo.dynamic_batch = true;
  const std::string model = export_model_bytes(net, {zeros({1, 3, 12, 12})}, eo);
  std::vector<std::vector<Tensor>> batches;
  for (int i = 0; i < 4; ++i) batches.push_back({randn({8, 3, 12, 12})});
  const QuantizeResult q = quantize_model(model, batches);
  InferenceSession compiled = InferenceSession::from_bytes(q.model, {}, "stem.int8.onnx");
  EXPECT_EQ(compiled.rewrites(), "2 Conv, 1 Gemm, 1 MaxPool, 1 Reshape/Flatten/Transpose on int8 kernels");
  SessionOptions eager;
  eager.optimization_level = 0;
  const Tensor x = randn({2, 3, 12, 12});
  const Tensor a = compiled.run({x})[0], b = InferenceSession::from_bytes(q.model, eager, "stem.int8.onnx").run({x})[0];
  const float step = output_step(q.model);
  ASSERT_GT(step, 0);
  EXPECT_LE(amax(abs(a - b), {}, false).item<float>(), step * 1.001f);
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  const std::string path = (kt::scratch_dir("quantize_stem") / "stem.int8.onnx").string();
  std::ofstream(path, std::ios::binary) << q.model;
  EXPECT_LE(amax(abs(a - kt::run_ort(path, {{"input", x}}).outputs.at(0).second), {}, false).item<float>(), step * 1.001f);
}

TEST(Quantize, OptionsChangeWhatIsQuantized) {
  const ResNetFixture f;
  QuantizeOptions o;
  o.keep_float = {"Gemm"};
  o.keep_sensitive = 2;
  o.activations = DType::Int8;
  o.method = "percentile";
  const QuantizeResult q = quantize_model(f.model, f.batches, o);
  EXPECT_EQ(q.report.quantized(), 7) << q.report.str();
  int kept = 0;
  for (const QuantizedLayer& l : q.report.layers) kept += l.kept_float;
  EXPECT_EQ(kept, 3);
  EXPECT_NE(q.report.str().find("kept in float32"), std::string::npos);
  EXPECT_EQ(InferenceSession::from_bytes(q.model).rewrites(), "7 Conv, 1 Add on int8 kernels");
  for (const std::string method : {"minmax", "entropy"}) {
    o = {};
    o.method = method;
    const QuantizeResult r = quantize_model(f.model, f.batches, o);
    EXPECT_LT(r.report.outputs[0].relative_error, 0.1) << method << "\n" << r.report.str();
  }
  o = {};
  o.reduce_range = true;
  ::onnx::ModelProto m;
  m.ParseFromString(quantize_model(f.model, f.batches, o).model);
  for (const auto& t : m.graph().initializer()) {
    if (t.data_type() != ::onnx::TensorProto::INT8 || t.dims_size() != 4) continue;
    for (char v : t.raw_data()) ASSERT_LE(std::abs(static_cast<int>(static_cast<int8_t>(v))), 63) << t.name();
  }
}

// Entropy calibration on spiky activations: a few values a thousand times
// out (0.02% of them) leave the bulk a handful of histogram bins over their
// whole range, where the search could not clip below them; the histogram's
// top follows the bulk (16 times its 99.9th percentile) and the clip lands
// near it, where min-max keeps the spikes and loses the bulk's resolution.
TEST(Quantize, EntropyClipsPastSpikesThatMinMaxKeeps) {
  manual_seed(1);
  for (const double spike : {20.0, 1000.0}) {
    std::vector<float> v = randn({200000}).to_vector<float>();
    for (size_t i = 0; i < v.size(); i += 5000) v[i] = static_cast<float>((i / 5000) % 2 ? spike : -spike);
    const Tensor x = from_vector<float>(v, {static_cast<int64_t>(v.size())});
    for (const bool after_relu : {false, true}) {
      const Tensor t = after_relu ? relu(x) : x;
      runtime::RangeObserver o;
      o.observe_extremes(t);
      o.observe_histogram(t);
      EXPECT_EQ(o.range("minmax", 0).second, spike);
      const auto [lo, hi] = o.range("entropy", 0);
      EXPECT_GT(hi, 2.5) << "spike " << spike << (after_relu ? " after ReLU" : "");
      EXPECT_LT(hi, 8.0) << "spike " << spike << (after_relu ? " after ReLU" : "");
      EXPECT_EQ(lo, after_relu ? 0.0 : -hi);
    }
  }
}

TEST(Quantize, BadRequestsSayWhatIsWrong) {
  const ResNetFixture f;
  EXPECT_NE(kt::message_of([&] { quantize_model(f.model, {}); }).find("no calibration batches"), std::string::npos);
  QuantizeOptions o;
  o.keep_float = {"no_such_layer"};
  EXPECT_NE(kt::message_of([&] { quantize_model(f.model, f.batches, o); }).find("--keep 'no_such_layer' names no quantizable layer"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { quantize_model("not a model", f.batches); }).find("not an ONNX model"), std::string::npos);
  EXPECT_NE(kt::message_of([&] { quantize_model(f.model, {{zeros({2, 3, 28, 28})}}); }).find("input"), std::string::npos);
}

}  // namespace

namespace {

std::pair<int, std::string> quantize_command(const std::string& args) { return kt::run_kiln("quantize " + args); }

TEST(QuantizeCommand, CalibratesOnAFolderOfInputsAndWritesTheModel) {
  const ResNetFixture f;
  const auto dir = kt::scratch_dir("quantize_command");
  const std::string model = (dir / "resnet8.onnx").string();
  std::ofstream(model, std::ios::binary) << f.model;
  std::filesystem::create_directories(dir / "calibration");
  for (size_t i = 0; i < f.batches.size(); ++i)
    io::save_npy((dir / "calibration" / ("batch" + std::to_string(i) + ".npy")).string(), f.batches[i][0]);
  auto [rc, out] = quantize_command(model + " --data " + (dir / "calibration").string() + " --method percentile");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("10 of 10 layers quantized (percentile calibration on 3 batch(es), compared on 1 held-out)"),
            std::string::npos) << out;
  EXPECT_NE(out.find("wrote " + (dir / "resnet8.int8.onnx").string()), std::string::npos) << out;
  EXPECT_EQ(InferenceSession((dir / "resnet8.int8.onnx").string()).rewrites(), "9 Conv, 1 Gemm, 2 Add on int8 kernels");
  // Mistakes say what to do.
  std::filesystem::create_directories(dir / "empty");
  std::tie(rc, out) = quantize_command(model + " --data " + (dir / "empty").string());
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("holds no calibration batches: put .npy or .pb files of the model's input there"), std::string::npos)
      << out;
  std::tie(rc, out) = quantize_command(model);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("give a model and --data"), std::string::npos) << out;
  // A file of another model's input is named, with the shape it should have.
  std::filesystem::create_directories(dir / "wrong");
  const auto wrong = dir / "wrong" / "batch0.npy";
  io::save_npy(wrong.string(), kiln::zeros({1, 128, 256}));
  std::tie(rc, out) = quantize_command(model + " --data " + (dir / "wrong").string());
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'" + wrong.string() + "' holds float32 [1, 128, 256], but the model's input is "),
            std::string::npos)
      << out;
  std::tie(rc, out) = quantize_command(model + " --data " + (dir / "calibration").string() + " --held-out 1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--held-out is the share of the calibration batches kept back"), std::string::npos) << out;
}

}  // namespace

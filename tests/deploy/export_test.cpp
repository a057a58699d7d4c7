// ONNX export: the files pass ONNX's checker, and ONNX Runtime computes the
// same outputs as Kiln for the benchmark workloads W1 to W4.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <filesystem>

#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "support/close.h"
#include "support/error_message.h"
#include "support/ort_reference.h"
#include "support/scratch.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;

fs::path temp_model(const std::string& name) {
  static const fs::path dir = kt::scratch_dir("export");
  return dir / name;
}

::onnx::ModelProto parse(const std::string& bytes) {
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  return m;
}

Tensor eager_output(const std::shared_ptr<nn::Cell>& net, const Tensor& x) {
  NoGradGuard no_grad;
  net->set_train(false);
  Tensor y = net->construct(x);
  net->set_train(true);
  return y;
}

// Batch-norm statistics away from their initial values, so folding them matters.
void randomize_buffers(nn::Cell& net) {
  Generator gen(3);
  NoGradGuard no_grad;
  for (auto& [name, b] : net.buffers_and_names()) {
    if (b.dtype() != DType::Float32) continue;
    b.copy_(rand(b.shape(), DType::Float32, &gen) + 0.5);
  }
}

struct Workload {
  const char* model;
  Shape input;
  bool tokens;
};

class ExportWorkload : public ::testing::TestWithParam<Workload> {};

TEST_P(ExportWorkload, OnnxRuntimeAgreesWithKiln) {
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh installs it)";
  const Workload& w = GetParam();
  manual_seed(5);
  auto net = models::make_model(w.model);
  randomize_buffers(*net);
  Generator gen(9);
  Tensor x = w.tokens ? randint(0, 128, w.input, DType::Int64, &gen) : randn(w.input, DType::Float32, &gen);
  fs::path path = temp_model(std::string(w.model) + ".onnx");
  ExportOptions options;
  options.metadata = {{"recipe", "model: test"}};
  ExportReport report = export_model(net, {x}, path.string(), options);
  EXPECT_GT(report.nodes, 0u);
  EXPECT_EQ(report.op_counts.count("BatchNormalization"), 0u) << "batch norm should be folded: " << report.str();

  ::onnx::ModelProto model;
  {
    std::ifstream f(path, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&f));
  }
  EXPECT_NO_THROW(::onnx::checker::check_model(model));
  EXPECT_EQ(model.opset_import(0).version(), 17);
  EXPECT_EQ(model.producer_name(), "kiln");
  ASSERT_EQ(model.metadata_props_size(), 1);
  EXPECT_EQ(model.metadata_props(0).value(), "model: test");
  EXPECT_EQ(model.graph().input(0).name(), "input");
  EXPECT_EQ(model.graph().output(0).name(), "output");

  Tensor expected = eager_output(net, x);
  auto ort = kt::run_ort(path.string(), {{"input", x}});
  ASSERT_EQ(ort.outputs.size(), 1u);
  EXPECT_TRUE(kt::all_close(ort.outputs[0].second, expected, 1e-4, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Workloads, ExportWorkload,
                         ::testing::Values(Workload{"mlp", {4, 1, 28, 28}, false}, Workload{"cnn", {4, 1, 28, 28}, false},
                                           Workload{"resnet8", {4, 1, 28, 28}, false},
                                           Workload{"char_transformer", {2, 128}, true}),
                         [](const auto& info) { return std::string(info.param.model); });

TEST(Export, DynamicBatchRunsAtOtherBatchSizes) {
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed";
  for (const char* name : {"cnn", "char_transformer"}) {
    manual_seed(2);
    auto net = models::make_model(name);
    bool tokens = std::string(name) == "char_transformer";
    Tensor sample = tokens ? randint(0, 128, {2, 128}, DType::Int64) : randn({2, 1, 28, 28});
    fs::path path = temp_model(std::string(name) + "_dynamic.onnx");
    ExportOptions options;
    options.input_names = {"pixels"};
    options.output_names = {"logits"};
    options.dynamic_batch = true;
    export_model(net, {sample}, path.string(), options);
    Tensor x = tokens ? randint(0, 128, {5, 128}, DType::Int64) : randn({5, 1, 28, 28});
    auto ort = kt::run_ort(path.string(), {{"pixels", x}});
    ASSERT_EQ(ort.outputs[0].first, "logits");
    EXPECT_TRUE(kt::all_close(ort.outputs[0].second, eager_output(net, x))) << name;
  }
}

TEST(Export, FixedShapesByDefault) {
  auto net = models::make_model("mlp");
  auto m = parse(export_model_bytes(net, {randn({3, 1, 28, 28})}));
  const auto& dims = m.graph().input(0).type().tensor_type().shape().dim();
  ASSERT_EQ(dims.size(), 4);
  EXPECT_EQ(dims[0].dim_value(), 3);
  ExportOptions options;
  options.dynamic_batch = true;
  auto dyn = parse(export_model_bytes(net, {randn({3, 1, 28, 28})}, options));
  EXPECT_EQ(dyn.graph().input(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
  EXPECT_EQ(dyn.graph().output(0).type().tensor_type().shape().dim(0).dim_param(), "batch");
}

TEST(Export, DropoutDisappearsAndTrainingModeIsRestored) {
  auto net = std::make_shared<nn::SequentialCell>();
  net->append(std::make_shared<nn::Dense>(8, 4));
  net->append(std::make_shared<nn::Dropout>(0.5));
  net->set_train(true);
  ExportReport report;
  ::testing::internal::CaptureStderr();
  auto m = parse(export_model_bytes(net, {randn({2, 8})}, {}, &report));
  std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("is in training mode; it is exported in inference mode"), std::string::npos) << note;
  EXPECT_TRUE(net->training());
  net->set_train(false);  // already in inference mode: nothing to say
  ::testing::internal::CaptureStderr();
  export_model_bytes(net, {randn({2, 8})});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  for (const auto& n : m.graph().node()) EXPECT_NE(n.op_type(), "Dropout");
  EXPECT_EQ(report.op_counts.at("Gemm"), 1);
}

// A Cell whose construct uses ops with no ONNX form.
// Two losses without an ONNX form (ONNX has no smooth L1 or logistic loss op).
struct LossInside : nn::Cell {
  Tensor construct(const Tensor& x) override {
    return smooth_l1_loss(x, x * 2.0) + binary_cross_entropy_with_logits(x, x * 0.5);
  }
};

TEST(Export, UnsupportedOpsAreListedTogether) {
  std::string msg = kt::message_of([] { export_model_bytes(std::make_shared<LossInside>(), {randn({2, 3})}); });
  EXPECT_NE(msg.find("2 op type(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("smooth_l1_loss (1 nodes)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("binary_cross_entropy_with_logits (1 nodes)"), std::string::npos) << msg;
}

TEST(Export, BadOptionsAreRefused) {
  auto net = models::make_model("mlp");
  ExportOptions old;
  old.opset = 11;
  EXPECT_NE(kt::message_of([&] { export_model_bytes(net, {randn({1, 784})}, old); }).find("opset 11"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { export_model_bytes(net, {}); }).find("sample input"), std::string::npos);
  std::string msg = kt::message_of([&] { export_model(net, {randn({1, 784})}, "/nonexistent/dir/m.onnx"); });
  EXPECT_NE(msg.find("cannot create"), std::string::npos) << msg;
}

TEST(Export, TensorFilesRoundTrip) {
  fs::path p = temp_model("t.pb");
  Tensor t = randn({2, 3});
  save_tensor_pb(p.string(), t, "x");
  EXPECT_TRUE(kt::all_close(load_tensor_pb(p.string()), t, 0, 0));
  std::ofstream(p, std::ios::binary | std::ios::trunc) << "\x08\x02\x08";
  EXPECT_NE(kt::message_of([&] { load_tensor_pb(p.string()); }).find("t.pb"), std::string::npos);
}

}  // namespace

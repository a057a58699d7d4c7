// Every op whose definition has an ONNX form is exported on each of its golden
// cases, loaded back by the runtime and compared with PyTorch's values; the
// first float32 case of each op also runs in ONNX Runtime. The op table's ONNX
// column is generated from the same definitions, so it cannot claim an export
// that fails. Ops without an ONNX form must be refused by name.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kiln/backend.h"
#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"
#include "ops/golden_cases.h"
#include "support/error_message.h"
#include "support/ort_reference.h"

namespace kiln::testing {
namespace {

bool variadic_outputs(const OpDef& op) { return !op.outputs.empty() && op.outputs.back().back() == '*'; }

// One op as a Cell: input 0 comes from the graph input, the others are
// constants of the graph. Ops with a variadic output (split) return their
// parts flattened and joined, so that all of them are checked.
class OneOp : public nn::Cell {
 public:
  OneOp(const GoldenCase& c) : case_(c), inputs_(c.make_inputs()) {}
  Tensor construct(const Tensor& x) override {
    std::vector<Tensor> in = inputs_;
    in[0] = x;
    const OpDef& op = OpRegistry::instance().get(case_.op);
    std::vector<Tensor> out = call(op, in, case_.attrs);
    if (!variadic_outputs(op)) return out[0];
    for (auto& t : out) t = t.reshape({-1});
    return concat(out, 0);
  }
  Tensor input0() const { return inputs_[0]; }

 private:
  const GoldenCase& case_;
  std::vector<Tensor> inputs_;
};

// The expected values in the layout OneOp returns them.
std::pair<std::vector<double>, Shape> expected(const GoldenCase& c) {
  const OpDef& op = OpRegistry::instance().get(c.op);
  if (!variadic_outputs(op)) return {c.outputs[0].values, c.outputs[0].shape};
  std::vector<double> all;
  for (auto& o : c.outputs) all.insert(all.end(), o.values.begin(), o.values.end());
  return {all, {static_cast<int64_t>(all.size())}};
}

// Cases of ops with an ONNX form, except those in training mode (export runs
// in inference mode, and says so when a node insists on training).
std::vector<int> exportable_cases() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) {
    const GoldenCase& c = golden_cases()[i];
    const OpDef& op = OpRegistry::instance().get(c.op);
    if (!op.onnx || c.attrs.get_bool("training", false) || c.outputs.empty()) continue;
    idx.push_back(static_cast<int>(i));
  }
  return idx;
}

// Cases ONNX cannot express: export must refuse them, saying why.
std::string expected_refusal(const GoldenCase& c) {
  if (c.op == "cross_entropy" && c.attrs.get_float("label_smoothing", 0.0) != 0.0) return "label smoothing";
  if (c.op == "scatter_reduce" && c.attrs.get_string("reduce", "prod") != "prod") return "needs opset 18";
  if (c.op == "adaptive_avg_pool2d") {
    const Shape& x = c.inputs[0].shape;
    auto o = c.attrs.get_ints("output_size");
    if (x[2] % o[0] != 0 || x[3] % o.back() != 0) return "uneven windows";
  }
  return "";
}

bool first_float32_case_of_its_op(int index) {
  const GoldenCase& c = golden_cases()[index];
  if (c.dtype != DType::Float32) return false;
  for (int i : exportable_cases()) {
    const GoldenCase& other = golden_cases()[i];
    if (other.op == c.op && other.dtype == DType::Float32) return i == index;
  }
  return false;
}

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

class OpExport : public ::testing::TestWithParam<int> {};

TEST_P(OpExport, RoundTripMatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  auto cell = std::make_shared<OneOp>(c);
  cell->set_train(false);
  Tensor x = cell->input0();
  ExportReport report;
  if (std::string refusal = expected_refusal(c); !refusal.empty()) {
    std::string msg = message_of([&] { export_model_bytes(cell, {x}, {}); });
    EXPECT_NE(msg.find(refusal), std::string::npos) << msg;
    return;
  }
  std::string bytes = export_model_bytes(cell, {x}, {}, &report);

  ::onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes));
  EXPECT_NO_THROW(::onnx::checker::check_model(model)) << c.name;
  const std::vector<std::string>& declared = OpRegistry::instance().get(c.op).onnx.types;
  for (const auto& n : model.graph().node()) {
    if (n.op_type() == "Identity") continue;  // the exporter's, when a graph output is an input
    bool joins = variadic_outputs(OpRegistry::instance().get(c.op)) && (n.op_type() == "Reshape" || n.op_type() == "Concat");
    if (joins) continue;  // OneOp's own
    EXPECT_NE(std::find(declared.begin(), declared.end(), n.op_type()), declared.end())
        << c.op << " wrote " << n.op_type() << ", which its definition does not list";
  }

  auto [values, shape] = expected(c);
  InferenceSession session = InferenceSession::from_bytes(bytes, {}, c.name);
  std::vector<Tensor> out = session.run(std::vector<Tensor>{x});
  ASSERT_EQ(out.size(), 1u);
  std::string diff = compare(out[0], values, shape, forward_tolerance(c.dtype));
  EXPECT_TRUE(diff.empty()) << c.name << " through ONNX and Kiln's runtime (" << report.str() << "):\n" << diff;
  // The same file on every other backend of this build, its kernels or the CPU's where it has none.
  for (int b = 1; b < kNumDeviceTypes; ++b) {
    const auto type = static_cast<DeviceType>(b);
    if (find_backend(type) == nullptr || !find_backend(type)->host_memory()) continue;
    SessionOptions options;
    options.device = device_type_name(type);
    std::vector<Tensor> on_device = InferenceSession::from_bytes(bytes, options, c.name).run(std::vector<Tensor>{x});
    ASSERT_EQ(on_device.size(), 1u);
    EXPECT_EQ(on_device[0].device().type, type) << c.name;
    diff = compare(on_device[0].to(cpu_device()), values, shape, forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " through ONNX and Kiln's runtime on " << options.device << ":\n" << diff;
  }

  if (!first_float32_case_of_its_op(GetParam())) return;
  if (!ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh installs it)";
  std::filesystem::path file = std::filesystem::temp_directory_path() /
                               ("kiln_op_export_" + std::to_string(::getpid()) + "_" + golden_test_name(GetParam()) + ".onnx");
  std::ofstream(file, std::ios::binary) << bytes;
  OrtResult ort = run_ort(file.string(), {{"input", x}});
  std::filesystem::remove(file);
  ASSERT_EQ(ort.outputs.size(), 1u);
  diff = compare(ort.outputs[0].second, values, shape, forward_tolerance(c.dtype));
  EXPECT_TRUE(diff.empty()) << c.name << " in ONNX Runtime:\n" << diff;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpExport, ::testing::ValuesIn(exportable_cases()), case_name);

// Dropout has no golden case (it draws); in inference it is an Identity.
TEST(OpExportCoverage, DropoutInInferenceIsAnIdentity) {
  struct Drop : nn::Cell {
    Tensor construct(const Tensor& x) override {
      return call(OpRegistry::instance().get("dropout"), {x}, {{"p", 0.5}, {"training", false}})[0] * 3.0;
    }
  };
  auto cell = std::make_shared<Drop>();
  cell->set_train(false);
  Tensor x = rand({2, 5});
  ExportReport report;
  std::string bytes = export_model_bytes(cell, {x}, {}, &report);
  EXPECT_EQ(report.op_counts["Identity"], 1) << report.str();
  Tensor y = InferenceSession::from_bytes(bytes).run(std::vector<Tensor>{x})[0];
  std::vector<double> want;
  for (float v : x.to_vector<float>()) want.push_back(3.0 * v);
  EXPECT_EQ(compare(y, want, {2, 5}, forward_tolerance(DType::Float32)), "");
}

// The ops that have an ONNX form are all covered by a golden case above
// (dropout by the test before this one).
TEST(OpExportCoverage, EveryOpWithAnOnnxFormHasACase) {
  std::set<std::string> covered = {"dropout"};
  for (int i : exportable_cases()) covered.insert(golden_cases()[i].op);
  std::vector<std::string> missing;
  for (const OpDef* op : OpRegistry::instance().all())
    if (op->onnx && !covered.count(op->name)) missing.push_back(op->name);
  EXPECT_TRUE(missing.empty()) << "ops with an ONNX writer but no exportable golden case: " << ::testing::PrintToString(missing);
}

// An op without an ONNX form is refused before anything is written, by name.
TEST(OpExportCoverage, AnOpWithoutAnOnnxFormIsRefusedByName) {
  const OpDef& op = OpRegistry::instance().get("smooth_l1_loss");
  ASSERT_FALSE(op.onnx) << "pick another op without an ONNX form for this test";
  struct Loss : nn::Cell {
    Tensor construct(const Tensor& x) override { return call1(OpRegistry::instance().get("smooth_l1_loss"), {x, x * 2.0}); }
  };
  auto cell = std::make_shared<Loss>();
  cell->set_train(false);
  std::string msg = message_of([&] { export_model_bytes(cell, {ones({2, 3})}, {}); });
  EXPECT_NE(msg.find("smooth_l1_loss (1 nodes)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ONNX column of `kiln ops`"), std::string::npos) << msg;
}

// Ops whose ONNX form is newer than the opset asked for say which opset they need.
TEST(OpExportCoverage, OpsNewerThanTheOpsetAreRefusedNamingTheOpset) {
  struct Lower : nn::Cell {
    Tensor construct(const Tensor& x) override { return tril(x); }
  };
  auto cell = std::make_shared<Lower>();
  cell->set_train(false);
  ExportOptions at13;
  at13.opset = 13;
  std::string msg = message_of([&] { export_model_bytes(cell, {ones({3, 3})}, at13); });
  EXPECT_NE(msg.find("tril is ONNX Trilu, which needs opset 14"), std::string::npos) << msg;
  ExportOptions at14;
  at14.opset = 14;
  EXPECT_NO_THROW(export_model_bytes(cell, {ones({3, 3})}, at14));
}

}  // namespace
}  // namespace kiln::testing

// MindSpore's files as a MindSpore user brings them: MindIR models run and
// match NumPy's answers, .ckpt weights load into the matching Kiln model
// (and a mismatched one lists every problem), Kiln's own .ckpt files round
// trip bit for bit, and broken files are named with their problem. The
// fixtures come from tests/mindspore/make_fixtures.py (KILN_MINDSPORE_FIXTURES).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kiln/io.h"
#include "kiln/migrate.h"
#include "kiln/nn.h"
#include "kiln/nn/layers.h"
#include "kiln/nn/recurrent.h"
#include "kiln/runtime.h"
#include "support/scratch.h"

namespace {

using namespace kiln;

std::string fixture(const std::string& name) {
  const char* dir = std::getenv("KILN_MINDSPORE_FIXTURES");
  EXPECT_NE(dir, nullptr) << "run through ctest: KILN_MINDSPORE_FIXTURES names make_fixtures.py's output";
  return std::string(dir ? dir : ".") + "/" + name;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.numel()) * ca.element_size()) == 0;
}

// The largest |a - b| / (1 + |b|).
double worst_error(const Tensor& a, const Tensor& b) {
  auto x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (1 + std::abs(y[i])));
  return worst;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class MindirModel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(MindirModel, MatchesNumPy) {
  const auto& [name, level] = GetParam();
  SessionOptions o;
  o.optimization_level = level;
  InferenceSession session(fixture(name + ".mindir"), o);
  EXPECT_EQ(session.producer(), "MindSpore 2.3.0");
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < session.inputs().size(); ++i)
    inputs.push_back(io::load_npy(fixture(name + ".input" + std::to_string(i) + ".npy")));
  auto outputs = session.run(inputs);
  ASSERT_EQ(outputs.size(), session.outputs().size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor want = io::load_npy(fixture(name + ".output" + std::to_string(i) + ".npy"));
    ASSERT_EQ(outputs[i].shape(), want.shape()) << name << " output " << i;
    EXPECT_LT(worst_error(outputs[i], want), 2e-5) << name << " output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MindirModel,
                         ::testing::Combine(::testing::Values("lenet", "resnet_block", "mlp", "transformer_layer", "lstm",
                                                              "primitives"),
                                            ::testing::Values(0, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_level" + std::to_string(std::get<1>(info.param));
                         });

TEST(Mindir, DescribesInputsAndOutputs) {
  InferenceSession lenet(fixture("lenet.mindir"));
  ASSERT_EQ(lenet.inputs().size(), 1u);
  EXPECT_EQ(lenet.inputs()[0].str(), "x: float32 [2, 1, 32, 32]");
  EXPECT_EQ(lenet.outputs()[0].str(), "output: float32 [2, 10]");
  InferenceSession lstm(fixture("lstm.mindir"));
  ASSERT_EQ(lstm.outputs().size(), 2u);  // a MakeTuple of (y, h_n)
  EXPECT_EQ(lstm.outputs()[1].str(), "output_1: float32 [1, 3, 8]");
  // A wrong input is named with what was expected.
  std::string e = error_of([&] { lenet.run({zeros({2, 1, 28, 28})}); });
  EXPECT_NE(e.find("input 'x' expects float32 [2, 1, 32, 32]"), std::string::npos) << e;
}

TEST(Mindir, ListsEveryMissingPrimitiveAtOnce) {
  std::string e = error_of([] { InferenceSession s(fixture("unsupported.mindir")); });
  EXPECT_NE(e.find("2 MindSpore primitive(s) are not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("FancyActivation: 2 node(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("CumulativeLogSumExp: 1 node(s)"), std::string::npos) << e;
  EXPECT_NE(e.find("kiln ops --mindspore"), std::string::npos) << e;
}

TEST(Mindir, RefusesATruncatedFile) {
  std::string e = error_of([] { InferenceSession s(fixture("truncated.mindir")); });
  EXPECT_NE(e.find("truncated.mindir"), std::string::npos) << e;
  EXPECT_NE(e.find("not a valid MindIR model"), std::string::npos) << e;
}

TEST(MindsporeCheckpoint, ReadsEveryTensorExactly) {
  auto ckpt = io::load_mindspore_checkpoint(fixture("weights.ckpt"));
  ASSERT_EQ(ckpt.tensors.size(), 17u);
  for (const auto& [name, t] : ckpt.tensors) {
    Tensor want = io::load_npy(fixture("ckpt_reference/" + name + ".npy"));
    EXPECT_TRUE(same_bits(t, want)) << name << ": " << t.meta_str() << " vs " << want.meta_str();
  }
  EXPECT_EQ(ckpt.tensors[11].first, "fc.weight");  // saved in two slices, joined
  EXPECT_EQ(ckpt.tensors.back().second.dim(), 0);   // learning_rate, a scalar saved with dims [0]
  EXPECT_EQ(ckpt.strings.at("epoch_note"), "trained on MNIST");
}

TEST(MindsporeCheckpoint, RoundTripsBitForBit) {
  auto dir = kiln::testing::scratch_dir("mindspore_roundtrip");
  io::NamedTensors tensors = {
      {"w", randn({3, 4})},
      {"half", randn({5}).to(DType::Float16)},
      {"brain", randn({2, 2}).to(DType::BFloat16)},
      {"double", randn({2}).to(DType::Float64)},
      {"steps", from_vector(std::vector<int64_t>{1, -2, 3}, Shape{3})},
      {"ids", from_vector(std::vector<int32_t>{7, 8}, Shape{2})},
      {"mask", from_vector(std::vector<double>{1, 0, 1}, Shape{3}).to(DType::Bool)},
      {"bytes", from_vector(std::vector<double>{0, 255}, Shape{2}).to(DType::UInt8)},
      {"signed", from_vector(std::vector<double>{-128, 127}, Shape{2}).to(DType::Int8)},
      {"scalar", scalar_tensor(2.5, DType::Float32)},
      {"empty", zeros({0, 3})},
      {"big", randn({300, 300})}};
  const std::string path = (dir / "kiln.ckpt").string();
  io::save_mindspore_checkpoint(path, tensors, {{"note", "from Kiln"}});
  auto back = io::load_mindspore_checkpoint(path);
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors[i].first);
    EXPECT_TRUE(same_bits(back.tensors[i].second, tensors[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(back.strings.at("note"), "from Kiln");
  EXPECT_EQ(io::load_tensor_file(path).size(), tensors.size());  // the generic reader tells .ckpt apart too
}

// A network with MindSpore's layers under Kiln's names: bn1.gamma is bn1.weight.
struct Net : nn::Cell {
  explicit Net(int64_t fc_out = 10, bool with_embedding = true, bool with_head = false) {
    register_cell("conv1", std::make_shared<nn::Conv2d>(3, 4, 3, nn::Conv2dOptions{.bias = false}));
    register_cell("bn1", std::make_shared<nn::BatchNorm2d>(4));
    register_cell("conv1d", std::make_shared<nn::Conv1d>(4, 6, 3, nn::Conv2dOptions{.bias = false}));
    register_cell("lstm", std::make_shared<nn::LSTM>(6, 8));
    if (with_embedding) register_cell("embedding", std::make_shared<nn::Embedding>(50, 8));
    register_cell("fc", std::make_shared<nn::Dense>(200, fc_out));
    if (with_head) register_cell("head", std::make_shared<nn::Dense>(10, 2));
  }
  Tensor construct(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Net"; }
};

Tensor value_of(const nn::Cell& cell, const std::string& name) {
  for (auto& [n, t] : cell.parameters_and_names())
    if (n == name) return t;
  for (auto& [n, t] : cell.buffers_and_names())
    if (n == name) return t;
  ADD_FAILURE() << "no " << name;
  return Tensor();
}

TEST(MindsporeCheckpoint, LoadsIntoTheMatchingNetworkStrictly) {
  Net net;
  io::LoadReport report = io::load_checkpoint(net, fixture("weights.ckpt"));
  EXPECT_TRUE(report.clean()) << report.str();
  EXPECT_EQ(report.loaded.size(), 13u) << report.str();  // the optimizer state is passed over
  auto ref = [](const std::string& tag) { return io::load_npy(fixture("ckpt_reference/" + tag + ".npy")); };
  EXPECT_TRUE(same_bits(value_of(net, "bn1.running_var"), ref("bn1.moving_variance")));
  EXPECT_TRUE(same_bits(value_of(net, "bn1.weight"), ref("bn1.gamma")));
  EXPECT_TRUE(same_bits(value_of(net, "embedding.weight"), ref("embedding.embedding_table")));
  EXPECT_TRUE(same_bits(value_of(net, "lstm.weight_hh_l0"), ref("lstm.w_hh_list.0")));
  EXPECT_TRUE(same_bits(value_of(net, "conv1d.weight"), ref("conv1d.weight").reshape({6, 4, 3})));
  EXPECT_TRUE(same_bits(value_of(net, "fc.weight"), ref("fc.weight")));
}

TEST(MindsporeCheckpoint, AMismatchedNetworkGetsEveryProblemAndKeepsItsWeights) {
  Net net(12, false, true);
  Tensor before = value_of(net, "conv1.weight").clone();
  std::string e = error_of([&] { io::load_checkpoint(net, fixture("weights.ckpt")); });
  EXPECT_NE(e.find("nothing was loaded"), std::string::npos) << e;
  EXPECT_NE(e.find("head.weight float32[2, 10]"), std::string::npos) << e;           // missing from the file
  EXPECT_NE(e.find("embedding.weight float32[50, 8]"), std::string::npos) << e;      // in the file only
  EXPECT_NE(e.find("fc.weight: [12, 200] in the cell, [10, 200] in the file"), std::string::npos) << e;
  EXPECT_TRUE(same_bits(value_of(net, "conv1.weight"), before));
  io::LoadReport loose = io::load_checkpoint(net, fixture("weights.ckpt"), {.strict = false, .print_report = false});
  EXPECT_EQ(loose.missing.size(), 2u);
  EXPECT_EQ(loose.unexpected.size(), 1u);
  EXPECT_EQ(loose.shape_mismatches.size(), 2u);  // fc.weight and fc.bias
}

TEST(MindsporeCheckpoint, NameMatchingShowsEachMindSporeName) {
  Net net;
  auto source = io::infos_of(io::load_tensor_file(fixture("weights.ckpt")));
  auto m = io::match_names(source, io::infos_of(net));
  EXPECT_TRUE(m.complete()) << io::format_matches(m, source, io::infos_of(net));
  EXPECT_EQ(m.ignored.size(), 4u);  // moments.*, global_step, learning_rate
  bool reshaped = false;
  for (const auto& x : m.matched) {
    if (x.source == "bn1.moving_mean") {
      EXPECT_EQ(x.target, "bn1.running_mean");
    }
    if (x.source == "lstm.b_ih_list.0") {
      EXPECT_EQ(x.target, "lstm.bias_ih_l0");
    }
    if (x.source == "conv1d.weight") reshaped = x.reshape;
  }
  EXPECT_TRUE(reshaped);
  const std::string table = io::format_matches(m, source, io::infos_of(net));
  EXPECT_NE(table.find("reshaped from MindSpore's 2-D form"), std::string::npos) << table;
}

TEST(MindsporeCheckpoint, APyTorchLightningCkptIsReadAsPyTorch) {
  // Lightning names its torch.save files .ckpt too: the bytes decide.
  auto dir = kiln::testing::scratch_dir("lightning_ckpt");
  std::filesystem::copy_file(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch/views.pt", dir / "lightning.ckpt",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(io::load_tensor_file((dir / "lightning.ckpt").string()).size(), 7u);
  EXPECT_FALSE(io::is_mindspore_checkpoint((dir / "lightning.ckpt").string()));
}

TEST(MindsporeCheckpoint, BrokenFilesAreNamedWithTheirProblem) {
  std::string e = error_of([] { io::load_mindspore_checkpoint(fixture("truncated.ckpt")); });
  EXPECT_NE(e.find("truncated.ckpt"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  e = error_of([] { io::load_tensor_file(fixture("encrypted.ckpt")); });
  EXPECT_NE(e.find("encrypted.ckpt"), std::string::npos) << e;
  EXPECT_NE(e.find("dec_key"), std::string::npos) << e;
  // Bytes after the last value that are no value at all.
  auto dir = kiln::testing::scratch_dir("ckpt_trailing");
  const std::string trailing = (dir / "trailing.ckpt").string();
  std::filesystem::copy_file(fixture("weights.ckpt"), trailing, std::filesystem::copy_options::overwrite_existing);
  { std::ofstream(trailing, std::ios::app | std::ios::binary) << std::string(2, '\0'); }
  e = error_of([&] { io::load_mindspore_checkpoint(trailing); });
  EXPECT_NE(e.find("does not parse"), std::string::npos) << e;
}

}  // namespace

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/migrate.h"
#include "support/error_message.h"
#include "support/scratch.h"
#include "support/zip_writer.h"

using namespace kiln;
using kiln::testing::message_of;
namespace fs = std::filesystem;

namespace {
const std::string kFixtures = std::string(KILN_FIXTURE_DIR) + "/torch";

// A torch.save-style zip: archive/data.pkl, archive/data/<key>, archive/version.
std::string write_pt(const std::string& name, const std::string& pickle,
                     const std::vector<std::pair<std::string, std::string>>& storages) {
  static const fs::path dir = kiln::testing::scratch_dir("migrate");
  std::string path = (dir / (name + ".pt")).string();
  fs::remove(path);
  std::vector<std::pair<std::string, std::string>> entries{{"archive/data.pkl", pickle}, {"archive/version", "3\n"}};
  for (const auto& [key, bytes] : storages) entries.emplace_back("archive/data/" + key, bytes);
  EXPECT_TRUE(kiln::testing::write_zip(path, entries));
  return path;
}

std::string unicode(const std::string& s) {
  std::string out = "X";
  for (int k = 0; k < 4; ++k) out += static_cast<char>((s.size() >> (8 * k)) & 0xff);
  return out + s;
}

// {"w": tensor of `size` floats over storage "0" of `numel` floats}, as torch.save pickles it.
std::string tensor_dict_pickle(int size, int numel, const std::string& global = "torch._utils\n_rebuild_tensor_v2\n") {
  std::string p = "\x80\x02}";
  p += unicode("w");
  p += "c" + global + "((" + unicode("storage") + "ctorch\nFloatStorage\n" + unicode("0") + unicode("cpu") + "K" +
       static_cast<char>(numel) + "tQ";
  p += std::string("K\0", 2);  // storage offset 0 (a literal would end at the NUL)
  p += std::string("K") + static_cast<char>(size) + "\x85K\x01\x85\x89)tR";
  p += "s.";
  return p;
}
}  // namespace

TEST(TorchFile, ReadsTensorsSharedStoragesViewsAndDtypes) {
  auto tensors = io::load_torch_file(kFixtures + "/views.pt");
  std::map<std::string, Tensor> t(tensors.begin(), tensors.end());
  ASSERT_TRUE(t.count("weight") && t.count("tied") && t.count("transposed") && t.count("half") && t.count("steps"));
  EXPECT_EQ(t["weight"].to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t["tied"].to_vector<float>(), t["weight"].to_vector<float>());
  EXPECT_EQ(t["transposed"].shape(), (Shape{3, 2}));
  EXPECT_EQ(t["transposed"].to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(t["half"].dtype(), DType::Float16);
  EXPECT_EQ(t["half"].to(DType::Float32).to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(t["brain"].dtype(), DType::BFloat16);
  EXPECT_EQ(t["brain"].to(DType::Float32).to_vector<float>(), (std::vector<float>{0.5f, 3.0f}));
  EXPECT_EQ(t["steps"].dtype(), DType::Int64);
  EXPECT_EQ(t["steps"].item<int64_t>(), 7);
  EXPECT_EQ(t["nested.bias"].to_vector<float>(), (std::vector<float>{3, 4}));  // {"nested": {"bias": ...}}
}

TEST(TorchFile, RefusesCodeLiesAndTruncation) {
  std::string floats(16, '\0');
  auto msg = message_of([&] { io::load_torch_file(write_pt("evil", tensor_dict_pickle(4, 4, "os\nsystem\n"), {{"0", floats}})); });
  EXPECT_NE(msg.find("the pickle asks for 'os system', which Kiln will not run"), std::string::npos) << msg;
  msg = message_of([&] { io::load_torch_file(write_pt("lies", tensor_dict_pickle(10, 4), {{"0", floats}})); });
  EXPECT_NE(msg.find("the file lies about its layout"), std::string::npos) << msg;
  msg = message_of([&] { io::load_torch_file(write_pt("short", tensor_dict_pickle(4, 4), {{"0", floats.substr(8)}})); });
  EXPECT_NE(msg.find("holds 8 bytes, expected 16"), std::string::npos) << msg;
  EXPECT_EQ(io::load_torch_file(write_pt("fine", tensor_dict_pickle(4, 4), {{"0", floats}}))[0].second.numel(), 4);
  std::string truncated = (fs::temp_directory_path() / ("kiln_trunc" + std::to_string(::getpid()) + ".pt")).string();
  fs::copy_file(kFixtures + "/views.pt", truncated, fs::copy_options::overwrite_existing);
  fs::resize_file(truncated, fs::file_size(truncated) / 2);
  msg = message_of([&] { io::load_tensor_file(truncated); });
  EXPECT_NE(msg.find("zip"), std::string::npos) << msg;
  fs::remove(truncated);
}

TEST(Migrate, NamesMatchBySimilarityAndOrderWithSuggestionsForTheRest) {
  std::vector<io::TensorInfo> source{{"module.layers.0.weight", DType::Float32, {4, 3}},
                                     {"module.layers.0.bias", DType::Float32, {4}},
                                     {"head.w", DType::Float32, {2, 4}},
                                     {"head.b", DType::Float32, {2}},
                                     {"bn.num_batches_tracked", DType::Int64, {}}};
  std::vector<io::TensorInfo> target{{"layer.0.weight", DType::Float32, {4, 3}},
                                     {"layer.0.bias", DType::Float32, {4}},
                                     {"out.weight", DType::Float32, {2, 4}},
                                     {"out.bias", DType::Float32, {2}}};
  auto m = io::match_names(source, target);
  ASSERT_TRUE(m.complete()) << io::format_matches(m, source, target);
  EXPECT_EQ(m.matched[0].how, "similar name");
  EXPECT_EQ(m.matched[2].how, "order and shape");
  EXPECT_EQ(m.ignored, (std::vector<std::string>{"bn.num_batches_tracked"}));
  // With the order broken, what is left is unmatched, with a suggestion for the unique shape.
  std::vector<io::TensorInfo> scrambled{source[0], source[1], source[3], {"extra", DType::Float32, {7}}, source[2]};
  m = io::match_names(scrambled, target);
  EXPECT_FALSE(m.complete());
  std::string report = io::format_matches(m, scrambled, target);
  EXPECT_NE(report.find("out.weight <- head.w (the only unmatched entry of a fitting shape)"), std::string::npos) << report;
  EXPECT_NE(report.find("extra [7]"), std::string::npos) << report;
  io::RenameRules rules;
  rules.rename = {{"^head\\.w$", "out.weight"}, {"^head\\.b$", "out.bias"}};
  rules.ignore = {"^extra$"};
  EXPECT_TRUE(io::match_names(scrambled, target, rules).complete());
}

// W2 and W3 trained in PyTorch (make_fixtures.py), converted by name matching,
// evaluated in Kiln: the same logits and the same test accuracy.
TEST(Migrate, PyTorchW2AndW3GiveTheSameLogitsAndAccuracyInKiln) {
  auto expected = nlohmann::json::parse(std::ifstream(kFixtures + "/expected.json"));
  data::BatchIterator test_set(data::load_fashion_mnist("test"), 500, false);
  Tensor first16 = test_set.dataset().inputs.slice(0, 0, 16);
  for (auto [file, model] : {std::pair<std::string, std::string>{"w2", "cnn"}, {"w3", "resnet8"}}) {
    io::NamedTensors torch = io::load_torch_file(kFixtures + "/" + file + ".pt");
    auto net = models::make_model(model);
    auto target = io::infos_of(*net);
    auto m = io::match_names(io::infos_of(torch), target);
    ASSERT_TRUE(m.complete()) << io::format_matches(m, io::infos_of(torch), target);
    std::string converted = (fs::temp_directory_path() / (file + std::to_string(::getpid()) + ".safetensors")).string();
    io::save_safetensors(converted, io::apply_matches(m, torch, target));
    io::load_cell(*net, converted);
    fs::remove(converted);
    train::Model kiln_model(net, [](const Tensor& o, const Tensor& y) { return cross_entropy(o, y); }, nullptr);
    auto logits = kiln_model.predict(first16).to_vector<float>();
    auto want = expected[file]["logits"];
    for (size_t i = 0; i < 16; ++i)
      for (size_t c = 0; c < 10; ++c) ASSERT_NEAR(logits[i * 10 + c], want[i][c].get<double>(), 1e-4) << file;
    double accuracy = kiln_model.eval(test_set).accuracy;
    EXPECT_NEAR(accuracy, expected[file]["accuracy"].get<double>(), 0.001) << file;
  }
}

TEST(Migrate, RenameRulesFromYamlAndTheirErrors) {
  std::string path = (fs::temp_directory_path() / ("kiln_rules" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(path) << "rename:\n  - {from: '^encoder\\.', to: 'layer.'}\ntranspose: ['^layer\\.1\\.weight$']\n"
                         "ignore: ['^aux']\n";
  auto rules = io::load_rename_rules(path);
  std::vector<io::TensorInfo> source{{"encoder.1.weight", DType::Float32, {3, 2}}, {"aux.loss", DType::Float32, {1}}};
  std::vector<io::TensorInfo> target{{"layer.1.weight", DType::Float32, {2, 3}}};
  auto m = io::match_names(source, target, rules);
  ASSERT_TRUE(m.complete()) << io::format_matches(m, source, target);
  EXPECT_EQ(m.matched[0].how, "rule");
  EXPECT_TRUE(m.matched[0].transpose);
  Tensor w = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  auto out = io::apply_matches(m, {{"encoder.1.weight", w}, {"aux.loss", zeros({1})}}, target);
  EXPECT_EQ(out[0].second.to_vector<float>(), (std::vector<float>{1, 3, 5, 2, 4, 6}));
  // A transpose rule may also name the entry as the file spells it.
  rules.transpose = {"^encoder\\.1\\.weight$"};
  m = io::match_names(source, target, rules);
  ASSERT_TRUE(m.complete()) << io::format_matches(m, source, target);
  EXPECT_TRUE(m.matched[0].transpose);
  // Without rules, a weight that fits only once transposed is suggested as such.
  std::vector<io::TensorInfo> other{{"fc.w", DType::Float32, {3, 2}}};
  m = io::match_names(other, target);
  std::string report = io::format_matches(m, other, target);
  EXPECT_NE(report.find("layer.1.weight <- fc.w, rename and transpose"), std::string::npos) << report;
  std::ofstream(path) << "rename:\n  - {from: '([', to: x}\n";
  auto msg = message_of([&] { io::load_rename_rules(path); });
  EXPECT_NE(msg.find("'([' is not a valid regular expression"), std::string::npos) << msg;
  std::ofstream(path) << "renames: []\n";
  msg = message_of([&] { io::load_rename_rules(path); });
  EXPECT_NE(msg.find("unknown key 'renames'; allowed keys: ignore, rename, transpose"), std::string::npos) << msg;
  fs::remove(path);
}

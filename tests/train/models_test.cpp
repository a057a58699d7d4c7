#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

TEST(Zoo, EveryModelBuildsAndRunsForwardAndBackward) {
  manual_seed(0);
  for (const auto& name : models::model_names()) {
    SCOPED_TRACE(name);
    const bool text = models::reads_tokens(name);
    models::ModelConfig c;
    if (text) {
      c.vocab_size = 20;
      c.seq_len = 16;
      c.d_model = 16;
      c.heads = 2;
      c.layers = 2;
      c.dim_feedforward = 32;
    }
    auto net = models::make_model(name, c);
    Tensor x = text ? randint(0, 20, {2, 16}) : randn({2, 1, 28, 28});
    Tensor y = (*net)(x);
    Shape expected = text ? Shape{2, 16, 20} : Shape{2, 10};
    EXPECT_EQ(y.shape(), expected);
    sum(y).backward();
    for (auto& [n, p] : net->parameters_and_names()) EXPECT_TRUE(p.grad().defined()) << n;
  }
  // stem 144 + 32, blocks 4,672 + 14,528 + 57,728, fc 650 (counted by hand for the W3 layout).
  EXPECT_EQ(models::make_model("resnet8")->parameter_count(), 77754);
  // torchvision's ResNet-50 with 1000 classes on RGB images, and GPT-2 small
  // (its embedding shared with the output layer), have these many parameters.
  EXPECT_EQ(
      models::make_model("resnet50", {.num_classes = 1000, .in_channels = 3, .image_size = 224})->parameter_count(),
      25557032);
  EXPECT_EQ(models::make_model("gpt2")->parameter_count(), 124439808);
  auto msg = message_of([] { models::make_model("vgg"); });
  EXPECT_NE(msg.find("the zoo has: mlp, cnn, resnet8, resnet18, resnet50, char_transformer, gpt2"), std::string::npos)
      << msg;
}

TEST(Checkpoint, SaveLoadRoundTripAndStrictReport) {
  manual_seed(1);
  auto a = models::make_model("resnet8"), b = models::make_model("resnet8");
  std::string path = (std::filesystem::temp_directory_path() / ("kiln_ckpt_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_cell(*a, path, {{"recipe", "test"}});
  auto file = io::load_safetensors(path);
  EXPECT_EQ(file.metadata.at("recipe"), "test");
  EXPECT_EQ(file.tensors.front().first, "0.weight");
  io::load_cell(*b, path);
  Tensor x = randn({2, 1, 28, 28});
  a->set_train(false);
  b->set_train(false);
  // Same weights, same algorithms: the same bits.
  EXPECT_EQ((*a)(x).to_vector<float>(), (*b)(x).to_vector<float>());
  auto cnn = models::make_model("cnn");
  auto msg = message_of([&] { io::load_cell(*cnn, path); });
  EXPECT_NE(msg.find("nothing was loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape mismatches (not loaded)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.weight: [32, 1, 3, 3] in the cell, [16, 1, 3, 3] in the file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in the file but not in the cell"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing from the file"), std::string::npos) << msg;
  // A flipped bit in the data is caught by the checksum.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    char c;
    f.read(&c, 1);
    f.seekp(-5, std::ios::end);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  msg = message_of([&] { io::load_cell(*b, path); });
  EXPECT_NE(msg.find("is corrupt: the checksum"), std::string::npos) << msg;
  // A truncated file is refused with a clear message.
  const auto full = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, full - 100);
  msg = message_of([&] { io::load_safetensors(path); });
  EXPECT_NE(msg.find("is truncated: its header describes " + std::to_string(full) + " bytes but the file has " +
                     std::to_string(full - 100)),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("copy it again"), std::string::npos) << msg;
  std::filesystem::resize_file(path, 4);
  msg = message_of([&] { io::load_safetensors(path); });
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

// A PyTorch checkpoint given where safetensors is expected is named as such,
// with the command that converts it (not a header "claiming" petabytes).
TEST(Checkpoint, OtherFormatsAreRecognisedByTheirMagic) {
  const std::string pt = std::string(KILN_FIXTURE_DIR) + "/torch/w2.pt";
  auto cnn = models::make_model("cnn");
  std::string msg = message_of([&] { io::load_cell(*cnn, pt); });
  EXPECT_NE(msg.find("is not a safetensors file: it is a PyTorch checkpoint (a torch.save zip archive); convert its "
                     "weights with 'kiln ckpt convert " + pt),
            std::string::npos)
      << msg;
  const std::string onnx = std::string(KILN_FIXTURE_DIR) + "/onnx/cnn.onnx";
  msg = message_of([&] { io::load_safetensors(onnx); });
  EXPECT_NE(msg.find("looks like an ONNX model"), std::string::npos) << msg;
  // A real safetensors file whose header length starts as an ONNX model does
  // (0x08, then a small byte: lengths 0x108, 0x208, ...) loads as what it is.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("kiln_ckpt_len_" + std::to_string(::getpid()) + ".safetensors")).string();
  bool seen = false;
  for (size_t name = 1; name < 400 && !seen; ++name) {
    io::save_safetensors(path, {{std::string(name, 'w'), zeros({2})}});
    std::ifstream f(path, std::ios::binary);
    unsigned char head[2];
    f.read(reinterpret_cast<char*>(head), 2);
    if (head[0] != 0x08 || head[1] > 0x20) continue;
    seen = true;
    EXPECT_EQ(io::load_safetensors(path).tensors.at(0).first, std::string(name, 'w'));
  }
  EXPECT_TRUE(seen) << "no header length of the form 0x??08 was made";
  std::filesystem::remove(path);
}

TEST(Checkpoint, NonStrictLoadsWhatMatchesAndReportsTheRest) {
  manual_seed(1);
  nn::SequentialCell small({std::make_shared<nn::Dense>(4, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(3, 2)});
  std::string path = (std::filesystem::temp_directory_path() / ("kiln_ckpt_ns_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_safetensors(path, {{"0.weight", randn({3, 4}).to(DType::Float64)}, {"0.bias", zeros({3})},
                              {"2.weight", zeros({5, 3})}, {"head.extra", zeros({1})}});
  Tensor before = small.parameters_and_names()[3].second.clone();  // 2.bias
  auto report = io::load_checkpoint(small, path, {.strict = false, .print_report = false});
  EXPECT_EQ(report.loaded, (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(report.converted, (std::vector<std::string>{"0.weight: float64 in the file, float32 in the cell"}));
  EXPECT_EQ(report.shape_mismatches, (std::vector<std::string>{"2.weight: [2, 3] in the cell, [5, 3] in the file"}));
  EXPECT_EQ(report.missing, (std::vector<std::string>{"2.bias float32[2]"}));
  EXPECT_EQ(report.unexpected, (std::vector<std::string>{"head.extra float32[1]"}));
  EXPECT_EQ(small.parameters_and_names()[1].second.to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(small.parameters_and_names()[3].second.to_vector<float>(), before.to_vector<float>());
  auto msg = message_of([&] { io::load_checkpoint(small, path); });
  EXPECT_NE(msg.find("(strict): nothing was loaded"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(Checkpoint, LoadingALargeFileHoldsLittleMoreThanTheModel) {
  auto peak_kb = [] {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
    return 0L;
  };
  nn::Dense big(4096, 4096, false);  // 64 MiB of float32
  std::string path = (std::filesystem::temp_directory_path() / ("kiln_big_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_cell(big, path);
  nn::Dense into(4096, 4096, false);
  std::ofstream("/proc/self/clear_refs") << "5";  // resets the peak to the current size
  long before = peak_kb();
  io::load_cell(into, path);
  long grown_mb = (peak_kb() - before) / 1024;
  EXPECT_LT(grown_mb, 40) << "loading copied more than it should";  // the file is 64 MiB; chunks are 16 MiB
  EXPECT_EQ(into.parameters_and_names()[0].second.to_vector<float>(), big.parameters_and_names()[0].second.to_vector<float>());
  std::filesystem::remove(path);
}

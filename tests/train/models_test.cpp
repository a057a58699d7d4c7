#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

TEST(Zoo, EveryModelBuildsAndRunsForwardAndBackward) {
  manual_seed(0);
  for (const auto& name : models::model_names()) {
    SCOPED_TRACE(name);
    models::ModelConfig c;
    if (name == "char_transformer") {
      c.vocab_size = 20;
      c.seq_len = 16;
      c.d_model = 16;
      c.heads = 2;
      c.dim_feedforward = 32;
    }
    auto net = models::make_model(name, c);
    Tensor x = name == "char_transformer" ? randint(0, 20, {2, 16}) : randn({2, 1, 28, 28});
    Tensor y = (*net)(x);
    Shape expected = name == "char_transformer" ? Shape{2, 16, 20} : Shape{2, 10};
    EXPECT_EQ(y.shape(), expected);
    sum(y).backward();
    for (auto& [n, p] : net->parameters_and_names()) EXPECT_TRUE(p.grad().defined()) << n;
  }
  // stem 144 + 32, blocks 4,672 + 14,528 + 57,728, fc 650 (counted by hand for the W3 layout).
  EXPECT_EQ(models::make_model("resnet8")->parameter_count(), 77754);
  auto msg = message_of([] { models::make_model("vgg"); });
  EXPECT_NE(msg.find("the zoo has: mlp, cnn, resnet8, resnet18, char_transformer"), std::string::npos) << msg;
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
  EXPECT_NE(msg.find("mismatch: 0.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in the file but not in the cell"), std::string::npos) << msg;
  // A truncated file is refused with a clear message.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  msg = message_of([&] { io::load_safetensors(path); });
  EXPECT_NE(msg.find("do not fit"), std::string::npos) << msg;
  std::filesystem::resize_file(path, 4);
  msg = message_of([&] { io::load_safetensors(path); });
  EXPECT_NE(msg.find("too short"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

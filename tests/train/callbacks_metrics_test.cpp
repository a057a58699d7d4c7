#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
struct Fixture {
  std::shared_ptr<nn::SequentialCell> net = std::make_shared<nn::SequentialCell>(
      std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(2, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(8, 2)});
  std::shared_ptr<optim::SGD> sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.05});
  train::Model model{net, std::make_shared<nn::CrossEntropyLoss>(), sgd};
  data::BatchIterator train_set{data::TensorDataset{randn({64, 2}), randint(0, 2, {64})}, 16, true};
  data::BatchIterator val_set{data::TensorDataset{randn({32, 2}), randint(0, 2, {32})}, 16, false};
};

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("kiln_cb_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}
}  // namespace

TEST(Callbacks, ValidationFillsEpochInfoAndLoggersWriteIt) {
  manual_seed(1);
  Fixture f;
  std::string dir = temp_dir("log");
  std::filesystem::create_directories(dir);
  auto jsonl = std::make_shared<train::MetricsLogger>(dir + "/m.jsonl");
  auto csv = std::make_shared<train::MetricsLogger>(dir + "/m.csv");
  int lambda_epochs = 0;
  auto lambda = std::make_shared<train::LambdaCallback>();
  lambda->epoch_end = [&](train::Model&, const train::EpochInfo& e) {
    ++lambda_epochs;
    EXPECT_FALSE(std::isnan(e.val_loss));
    EXPECT_GE(e.val_accuracy, 0.0);
  };
  auto history = f.model.train(2, f.train_set, {jsonl, csv, lambda, std::make_shared<train::TimeMonitor>()}, &f.val_set);
  EXPECT_EQ(lambda_epochs, 2);
  jsonl.reset();
  csv.reset();
  std::ifstream j(dir + "/m.jsonl"), c(dir + "/m.csv");
  std::string line;
  std::getline(j, line);
  EXPECT_NE(line.find("\"val_loss\""), std::string::npos) << line;
  std::getline(c, line);
  EXPECT_EQ(line, "epoch,train_loss,val_loss,val_accuracy,seconds,samples_per_s,lr");
  std::filesystem::remove_all(dir);
}

TEST(Callbacks, ModelCheckpointKeepsTheLastK) {
  manual_seed(2);
  Fixture f;
  std::string dir = temp_dir("ckpt");
  auto ckpt = std::make_shared<train::ModelCheckpoint>(dir, 1, 2);
  f.model.train(4, f.train_set, {ckpt});
  EXPECT_EQ(ckpt->kept().size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(dir + "/checkpoint-epoch2.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/checkpoint-epoch4.safetensors"));
  auto other = std::make_shared<nn::SequentialCell>(
      std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(2, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(8, 2)});
  io::load_cell(*other, dir + "/checkpoint-epoch4.safetensors");
  Tensor x = randn({3, 2});
  EXPECT_EQ((*other)(x).to_vector<float>(), (*f.net)(x).to_vector<float>());
  std::filesystem::remove_all(dir);
}

TEST(Callbacks, ModelCheckpointEveryNSteps) {
  manual_seed(2);
  Fixture f;
  std::string dir = temp_dir("ckpt_steps");
  // 4 steps an epoch, 3 epochs: steps 5 and 10 are saved, epochs are not.
  auto ckpt = std::make_shared<train::ModelCheckpoint>(dir, 0, 5, "run", 5);
  f.model.train(3, f.train_set, {ckpt});
  EXPECT_EQ(std::vector<std::string>(ckpt->kept().begin(), ckpt->kept().end()),
            (std::vector<std::string>{dir + "/run-step5.safetensors", dir + "/run-step10.safetensors"}));
  EXPECT_EQ(io::load_safetensors(dir + "/run-step10.safetensors").metadata.at("epoch"), "3");
  EXPECT_THROW(train::ModelCheckpoint(dir, 0, 1, "x", 0), Error);
  std::filesystem::remove_all(dir);
}

TEST(Callbacks, EarlyStoppingAndReduceLROnPlateau) {
  manual_seed(3);
  Fixture f;
  // A learning rate of 0 cannot improve anything (min_delta absorbs the
  // rounding of summing the same losses in another order): patience 2 stops after epoch 3.
  f.sgd->set_lr(0.0);
  auto stop = std::make_shared<train::EarlyStopping>("loss", 2, 1e-6);
  auto history = f.model.train(10, f.train_set, {stop});
  EXPECT_EQ(history.size(), 3u);
  EXPECT_EQ(stop->stopped_epoch(), 3);

  Fixture g;
  g.sgd->set_lr(1e-30);  // below float32 resolution: the validation loss plateaus exactly
  auto plateau = std::make_shared<train::ReduceLROnPlateau>("val_loss", 0.5, 1);
  g.model.train(3, g.train_set, {plateau}, &g.val_set);
  EXPECT_LT(g.sgd->lr(), 1e-30);
  auto msg = message_of([&] { g.model.train(1, g.train_set, {std::make_shared<train::EarlyStopping>("val_loss")}); });
  EXPECT_NE(msg.find("pass a validation set"), std::string::npos) << msg;
  EXPECT_THROW(train::EarlyStopping("f1"), Error);
}

TEST(Metrics, TopKAndConfusionMatrix) {
  Tensor logits = from_vector<float>({0.1f, 0.7f, 0.2f,   // predicts 1
                                      0.5f, 0.3f, 0.2f,   // predicts 0
                                      0.2f, 0.3f, 0.5f,   // predicts 2
                                      0.4f, 0.35f, 0.25f}, {4, 3});
  Tensor labels = from_vector<int64_t>({1, 1, 2, 2});
  EXPECT_DOUBLE_EQ(train::metrics::top_k_accuracy(logits, labels, 1), 0.5);
  EXPECT_DOUBLE_EQ(train::metrics::top_k_accuracy(logits, labels, 2), 0.75);
  EXPECT_DOUBLE_EQ(train::metrics::top_k_accuracy(logits, labels, 3), 1.0);
  train::metrics::ConfusionMatrix cm(3);
  cm.update(logits, labels);
  EXPECT_EQ(cm.count(1, 1), 1);
  EXPECT_EQ(cm.count(1, 0), 1);
  EXPECT_EQ(cm.count(2, 0), 1);
  EXPECT_DOUBLE_EQ(cm.accuracy(), 0.5);
  EXPECT_DOUBLE_EQ(cm.precision(0), 0.0);
  EXPECT_DOUBLE_EQ(cm.recall(1), 0.5);
  EXPECT_DOUBLE_EQ(cm.precision(2), 1.0);
  EXPECT_DOUBLE_EQ(cm.f1(2), 2 * 1.0 * 0.5 / 1.5);
  EXPECT_NEAR(cm.macro_f1(), (0.0 + 2.0 / 3.0 + 2.0 / 3.0) / 3.0, 1e-12);
  EXPECT_NE(cm.str().find("label\\pred"), std::string::npos);
  EXPECT_THROW(cm.update(from_vector<int64_t>({5}), from_vector<int64_t>({0})), Error);
}

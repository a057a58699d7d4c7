// W1 (MLP 784-512-256-10, SGD momentum 0.9, batch 64, cosine decay of the
// learning rate over the epoch) for one epoch on the real Fashion-MNIST: at
// least 84% test accuracy (85.1-85.5% over seeds 0-2 here). Without the decay
// the last step's weights swing between 77% and 84%, in PyTorch as in Kiln.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/kiln.h"

using namespace kiln;

TEST(FashionMnist, W1ReachesEightyFourPercentInOneEpoch) {
  ASSERT_TRUE(std::filesystem::exists(data::kFashionMnistDir))
      << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)";
  manual_seed(0);
  data::BatchIterator train_set(data::load_fashion_mnist("train"), 64, true, false, 1);
  data::BatchIterator test_set(data::load_fashion_mnist("test"), 1000, false);
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Dense>(784, 512), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dense>(512, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(256, 10)});
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  train::Model model(net, [](const Tensor& o, const Tensor& y) { return cross_entropy(o, y); }, sgd);
  auto schedule = optim::cosine_schedule(0.05, train_set.batches_per_epoch());
  auto history = model.train(1, train_set, {std::make_shared<train::LearningRateScheduler>(schedule)});
  auto r = model.eval(test_set);
  std::printf("W1, 1 epoch: test accuracy %.2f%%, %.0f samples/s\n", 100 * r.accuracy, history[0].samples_per_s);
  EXPECT_GE(r.accuracy, 0.84);
}

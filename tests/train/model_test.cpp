#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "support/blobs.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::blobs;
using kiln::testing::blobs_loss;
using kiln::testing::blobs_mlp;
using kiln::testing::message_of;

namespace {
struct CountingCallback : train::Callback {
  int steps = 0, epochs = 0;
  void on_step_end(train::Model&, const train::StepInfo&) override { ++steps; }
  void on_epoch_end(train::Model&, const train::EpochInfo&) override { ++epochs; }
};
}  // namespace

TEST(Model, TrainsAClassifierAndEvaluatesIt) {
  manual_seed(4);
  auto net = blobs_mlp();
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  train::Model model(net, blobs_loss(), sgd);
  data::BatchIterator train_set(blobs(512, 1), 32, true, false, 7);
  data::BatchIterator test_set(blobs(256, 2), 64, false);
  double before = model.eval(test_set).loss;
  auto counter = std::make_shared<CountingCallback>();
  auto history = model.train(3, train_set, {counter});
  ASSERT_EQ(history.size(), 3u);
  EXPECT_LT(history.back().mean_loss, history.front().mean_loss);
  EXPECT_EQ(counter->steps, 3 * 16);
  EXPECT_EQ(counter->epochs, 3);
  auto r = model.eval(test_set);
  EXPECT_LT(r.loss, before);
  EXPECT_GT(r.accuracy, 0.97);
  EXPECT_EQ(r.samples, 256);
  EXPECT_EQ(model.predict(blobs(5, 3).inputs).shape(), (Shape{5, 2}));
}

TEST(Model, ANetworkThatComputesItsOwnLossTrainsOnEveryColumn) {
  manual_seed(4);
  auto net = blobs_mlp();
  data::TensorDataset set = blobs(512, 1);
  // Column 2 weighs each sample: class 1 counts four times as much, so a
  // constant guess drifts towards it before the blobs are learned.
  set.extras = {add(mul(cast(set.labels, DType::Float32), full({512}, 3.0)), full({512}, 1.0))};
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  int64_t columns_seen = 0;
  CrossEntropyOptions per_sample;
  per_sample.reduction = "none";
  train::Model model(net, [&](const data::Batch& b) {
    columns_seen = 2 + static_cast<int64_t>(b.extras.size());
    return mean(mul(cross_entropy((*net)(b.inputs), b.labels, per_sample), b.extras.at(0)));
  }, sgd);
  data::BatchIterator batches(set, 32, true, false, 7);
  double before = model.eval(batches).loss;
  auto history = model.train(3, batches);
  EXPECT_EQ(columns_seen, 3);
  EXPECT_LT(history.back().mean_loss, history.front().mean_loss);
  auto r = model.eval(batches);
  EXPECT_LT(r.loss, before / 4);
  EXPECT_TRUE(std::isnan(r.accuracy)) << "no metric without outputs";
  EXPECT_NE(message_of([&] { model.predict(set.inputs); }).find("computes its loss from whole batches"),
            std::string::npos);
  EXPECT_NE(message_of([&] { model.set_metrics({std::make_shared<train::metrics::Accuracy>()}); })
                .find("metrics need the network's outputs"),
            std::string::npos);
}

TEST(Model, StopsOnANonFiniteLossNamingTheStep) {
  manual_seed(5);
  auto net = blobs_mlp();
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 1e30});
  train::Model model(net, blobs_loss(), sgd);
  data::BatchIterator train_set(blobs(256, 1), 32, true);
  auto msg = message_of([&] { model.train(5, train_set); });
  EXPECT_NE(msg.find("the loss became"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at step"), std::string::npos) << msg;
  EXPECT_NE(msg.find("last finite loss"), std::string::npos) << msg;
}

TEST(Model, NonFinitePolicyStopEndsTrainingAndSkipStepSkipsTheBatch) {
  data::TensorDataset poisoned = blobs(256, 1);
  poisoned.inputs.data<float>()[2 * 40] = std::nanf("");  // sample 40: the second batch of 32
  {
    manual_seed(6);
    auto net = blobs_mlp();
    train::Model model(net, blobs_loss(), std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1}));
    model.set_nonfinite_policy(train::NonFinitePolicy::Stop);
    data::BatchIterator batches(poisoned, 32, false);
    auto counter = std::make_shared<CountingCallback>();
    auto history = model.train(3, batches, {counter});
    EXPECT_EQ(history.size(), 1u);  // the first epoch ends at the bad batch
    EXPECT_EQ(counter->steps, 1);
  }
  manual_seed(6);
  auto net = blobs_mlp();
  train::Model model(net, blobs_loss(), std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1}));
  model.set_nonfinite_policy(train::NonFinitePolicy::SkipStep);
  data::BatchIterator batches(poisoned, 32, false);
  auto counter = std::make_shared<CountingCallback>();
  model.train(3, batches, {counter});
  EXPECT_EQ(counter->steps, 3 * 7);  // 8 batches an epoch, one skipped
  for (auto& p : net->trainable_params())
    for (float v : p.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
  data::BatchIterator test_set(blobs(256, 2), 64, false);
  EXPECT_GT(model.eval(test_set).accuracy, 0.95);
}

TEST(Model, EvalReportsThePluggedMetrics) {
  manual_seed(4);
  auto net = blobs_mlp();
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  train::Model model(net, blobs_loss(), sgd,
                     {std::make_shared<train::metrics::Accuracy>(), std::make_shared<train::metrics::Accuracy>(2),
                      std::make_shared<train::metrics::ClassificationReport>(2)});
  data::BatchIterator train_set(blobs(512, 1), 32, true, false, 7);
  data::BatchIterator test_set(blobs(256, 2), 64, false);
  model.train(2, train_set);
  auto r = model.eval(test_set);
  EXPECT_GT(r["accuracy"], 0.95);
  EXPECT_DOUBLE_EQ(r["top2_accuracy"], 1.0);  // two classes: always in the top 2
  EXPECT_GT(r["f1"], 0.95);
  EXPECT_GT(r["precision"], 0.95);
  EXPECT_GT(r["recall"], 0.95);
  EXPECT_DOUBLE_EQ(r["loss"], r.loss);
  auto msg = message_of([&] { r["auc"]; });
  EXPECT_NE(msg.find("no metric 'auc' in this evaluation; it has: accuracy, f1, loss, precision, recall, top2_accuracy"),
            std::string::npos)
      << msg;
}

TEST(Metrics, AccuracyCountsTokensOfSequenceOutputs) {
  // [N=1, T=3, C=2] logits; predictions 1, 0, 1 against labels 1, 1, 1.
  Tensor logits = from_vector<float>({0, 1, 1, 0, 0, 2}, Shape{1, 3, 2});
  Tensor labels = from_vector<int64_t>({1, 1, 1}, Shape{1, 3});
  train::metrics::Accuracy acc;
  acc.update(logits, labels);
  EXPECT_NEAR(acc.results()[0].second, 2.0 / 3.0, 1e-12);
}

// Steps move between thread counts while the governor measures them, in
// eager and in graph mode; the run learns the same as one on fixed threads,
// up to the order of summation.
TEST(Model, AdaptingTheThreadCountTrainsTheSame) {
  const int before = get_num_threads();
  set_num_threads(2);
  for (Mode mode : {Mode::Eager, Mode::Graph}) {
    std::vector<double> losses[2];
    for (int adapt = 0; adapt < 2; ++adapt) {
      manual_seed(4);
      auto net = blobs_mlp();
      auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      train::Model model(net, blobs_loss(), sgd);
      model.set_mode(mode);
      model.set_adapt_threads(adapt == 1);
      auto record = std::make_shared<train::LambdaCallback>();
      record->step_end = [&, adapt](train::Model&, const train::StepInfo& s) { losses[adapt].push_back(s.loss); };
      data::BatchIterator train_set(blobs(512, 1), 32, true, false, 7);
      model.train(2, train_set, {record});
    }
    ASSERT_EQ(losses[0].size(), 32u);
    ASSERT_EQ(losses[1].size(), losses[0].size());
    for (size_t i = 0; i < losses[0].size(); ++i)
      EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * (1 + std::abs(losses[0][i]))) << "step " << i;
  }
  set_num_threads(before);
}

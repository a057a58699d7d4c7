#include <gtest/gtest.h>

#include <atomic>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
// Sample i has input [i] (float32) and label i (int64).
std::shared_ptr<data::TensorDataset> counting(int64_t n) {
  return std::make_shared<data::TensorDataset>(arange(0.0, static_cast<double>(n), 1.0).reshape({n, 1}), arange(n));
}

std::vector<std::vector<int64_t>> epoch_labels(data::Pipeline& p) {
  p.start_epoch();
  std::vector<std::vector<int64_t>> out;
  data::Batch b;
  while (p.next(b)) out.push_back(b.labels.to_vector<int64_t>());
  return out;
}

// Adds a random value in [0, 1) drawn from the sample's own generator.
data::Transform add_noise() {
  return {"add_noise", [](const Tensor& x, Generator& g) {
            return add(x, full(x.shape(), static_cast<double>(g.next() % 1000) / 1000.0));
          }};
}
}  // namespace

TEST(Pipeline, BatchesInOrderWithRemainderOrDropped) {
  data::Pipeline p(counting(10));
  p.batch(4).num_parallel_workers(0);
  EXPECT_EQ(p.batches_per_epoch(), 3);
  auto e = epoch_labels(p);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[2], (std::vector<int64_t>{8, 9}));
  data::Pipeline d(counting(10));
  d.batch(4, /*drop_remainder=*/true);
  EXPECT_EQ(d.batches_per_epoch(), 2);
  EXPECT_EQ(epoch_labels(d).size(), 2u);
}

TEST(Pipeline, SkipTakeCountSamplesBeforeBatchAndBatchesAfter) {
  data::Pipeline samples(counting(20));
  samples.skip(3).take(5).batch(2);
  auto e = epoch_labels(samples);
  EXPECT_EQ(e, (std::vector<std::vector<int64_t>>{{3, 4}, {5, 6}, {7}}));
  data::Pipeline batches(counting(20));
  batches.batch(4).skip(1).take(2);
  e = epoch_labels(batches);
  EXPECT_EQ(e, (std::vector<std::vector<int64_t>>{{4, 5, 6, 7}, {8, 9, 10, 11}}));
}

TEST(Pipeline, RepeatMakesAnEpochSeveralPassesInNewOrders) {
  data::Pipeline p(counting(6));
  p.shuffle(5).batch(6).repeat(3);
  EXPECT_EQ(p.batches_per_epoch(), 3);
  EXPECT_EQ(p.samples_per_epoch(), 18);
  auto e = epoch_labels(p);
  ASSERT_EQ(e.size(), 3u);
  for (auto& pass : e) {
    auto sorted = pass;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  }
  EXPECT_TRUE(e[0] != e[1] || e[1] != e[2]);
}

TEST(Pipeline, ShuffleIsFixedBySeedAndChangesEveryEpoch) {
  data::Pipeline a(counting(50)), b(counting(50)), c(counting(50));
  a.shuffle(1).batch(50);
  b.shuffle(1).batch(50);
  c.shuffle(2).batch(50);
  auto a0 = epoch_labels(a), a1 = epoch_labels(a);
  EXPECT_EQ(a0, epoch_labels(b));
  EXPECT_NE(a0, a1);
  EXPECT_NE(a0, epoch_labels(c));
  auto sorted = a0[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted.front(), 0);
  EXPECT_EQ(sorted.back(), 49);
  EXPECT_EQ(std::set<int64_t>(sorted.begin(), sorted.end()).size(), 50u);
}

TEST(Pipeline, ResultsDoNotDependOnTheNumberOfWorkers) {
  auto run = [](int workers) {
    data::Pipeline p(counting(37));
    p.map({add_noise()}).shuffle(9).batch(5).num_parallel_workers(workers).prefetch(3);
    std::vector<float> values;
    for (int epoch = 0; epoch < 2; ++epoch) {
      p.start_epoch();
      data::Batch b;
      while (p.next(b)) {
        auto v = b.inputs.to_vector<float>();
        values.insert(values.end(), v.begin(), v.end());
      }
    }
    return values;
  };
  auto inline_values = run(0);
  ASSERT_EQ(inline_values.size(), 74u);
  EXPECT_EQ(run(1), inline_values);
  EXPECT_EQ(run(4), inline_values);
  // The noise really is random per sample: not every fractional part is equal.
  std::set<float> fractions;
  for (float v : inline_values) fractions.insert(v - std::floor(v));
  EXPECT_GT(fractions.size(), 20u);
}

TEST(Pipeline, WorkersKeepOrderWhenSamplesFinishOutOfOrder) {
  data::Transform slow_for_even{"slow_for_even", [](const Tensor& x, Generator&) {
                                  if (static_cast<int64_t>(x.item<float>()) % 2 == 0)
                                    std::this_thread::sleep_for(std::chrono::milliseconds(2));
                                  return x;
                                }};
  data::Pipeline p(counting(24));
  p.map({slow_for_even}).batch(1).num_parallel_workers(4).prefetch(8);
  auto e = epoch_labels(p);
  ASSERT_EQ(e.size(), 24u);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(e[static_cast<size_t>(i)][0], i);
}

// Workers are the pipeline's parallelism: the ops of a transform stay on
// the worker instead of starting OpenMP teams beside the training step's.
TEST(Pipeline, TransformsRunOnOneThreadEach) {
  const int before = get_num_threads();
  set_num_threads(2);
  std::atomic<int> widest{0};
  data::Transform note{"note_threads", [&](const Tensor& x, Generator&) {
                         widest = std::max(widest.load(), get_num_threads());
                         return x;
                       }};
  data::Pipeline p(counting(8));
  p.map({note}).batch(2).num_parallel_workers(2);
  EXPECT_EQ(epoch_labels(p).size(), 4u);
  EXPECT_EQ(widest.load(), 1);
  set_num_threads(before);
}

TEST(Pipeline, LabelTransformsAndSingleSamples) {
  data::Pipeline p(counting(4));
  p.map({{"plus_ten", [](const Tensor& y, Generator&) { return add(y, full(y.shape(), 10.0, y.dtype())); }}},
        data::Column::Label);
  data::Sample s = p.sample(2);
  EXPECT_EQ(s.label.item<int64_t>(), 12);
  EXPECT_FLOAT_EQ(s.input.to_vector<float>()[0], 2.0f);
}

TEST(Pipeline, FurtherColumnsAreMappedBatchedAndShuffledWithTheirSamples) {
  // Column 2 is a per-sample weight 100 + i, column 3 a pair [i, -i].
  const int64_t n = 10;
  Tensor ids = arange(0.0, static_cast<double>(n), 1.0);
  auto dataset = std::make_shared<data::TensorDataset>(
      ids.reshape({n, 1}), arange(n), std::vector<Tensor>{add(ids, full({n}, 100.0)), stack({ids, neg(ids)}, 1)});
  for (int workers : {0, 2}) {
    data::Pipeline p(dataset);
    p.map({{"halve", [](const Tensor& w, Generator&) { return div(w, full(w.shape(), 2.0)); }}}, size_t{2})
        .shuffle(5)
        .batch(4)
        .num_parallel_workers(workers);
    p.start_epoch();
    data::Batch b;
    int64_t seen = 0;
    while (p.next(b)) {
      ASSERT_EQ(b.extras.size(), 2u);
      auto labels = b.labels.to_vector<int64_t>();
      auto weights = b.extras[0].to_vector<float>();
      auto pairs = b.extras[1].to_vector<float>();
      EXPECT_EQ(b.extras[1].shape(), (Shape{static_cast<int64_t>(labels.size()), 2}));
      for (size_t i = 0; i < labels.size(); ++i) {
        EXPECT_FLOAT_EQ(weights[i], (100.0f + static_cast<float>(labels[i])) / 2) << "a weight left its sample";
        EXPECT_FLOAT_EQ(pairs[2 * i + 1], -static_cast<float>(labels[i]));
      }
      seen += static_cast<int64_t>(labels.size());
    }
    EXPECT_EQ(seen, n);
  }
  data::BatchIterator it(*dataset, 3, true, false, 1);
  data::Batch b;
  it.start_epoch();
  ASSERT_TRUE(it.next(b));
  ASSERT_EQ(b.extras.size(), 2u);
  EXPECT_FLOAT_EQ(b.extras[0].to_vector<float>()[0], 100.0f + static_cast<float>(b.labels.to_vector<int64_t>()[0]));
}

TEST(Pipeline, AColumnPastTheSamplesIsNamed) {
  data::Pipeline p(counting(4));
  p.map({add_noise()}, size_t{3});
  auto msg = message_of([&] { p.sample(0); });
  EXPECT_NE(msg.find("transforms map column 3 but dataset index 0 has 2 columns"), std::string::npos) << msg;
  msg = message_of([&] { data::TensorDataset(zeros({4, 1}), arange(4), {zeros({3})}); });
  EXPECT_NE(msg.find("column 2 needs a row per sample (4), got float32[3]"), std::string::npos) << msg;
}

TEST(Pipeline, ATransformErrorNamesTheTransformAndTheSample) {
  data::Transform fails_on_7{"fails_on_7", [](const Tensor& x, Generator&) {
                               KILN_CHECK(x.to_vector<float>()[0] != 7.0f, "seven is not allowed");
                               return x;
                             }};
  for (int workers : {0, 2}) {
    data::Pipeline p(counting(10));
    p.map({fails_on_7}).batch(3).num_parallel_workers(workers);
    auto msg = message_of([&] { epoch_labels(p); });
    EXPECT_NE(msg.find("transform 'fails_on_7' failed on the input of dataset index 7: seven is not allowed"),
              std::string::npos)
        << msg;
  }
}

TEST(Pipeline, CollateNamesTheSampleWithAnotherShape) {
  data::Transform grow_third{"grow_third", [](const Tensor& x, Generator&) {
                               return x.to_vector<float>()[0] == 2.0f ? zeros({2}) : x;
                             }};
  data::Pipeline p(counting(4));
  p.map({grow_third}).batch(4).num_parallel_workers(0);
  auto msg = message_of([&] { epoch_labels(p); });
  EXPECT_NE(msg.find("the input of sample 2 in the batch is float32[2] but sample 0's is float32[1]"),
            std::string::npos)
      << msg;
}

TEST(Pipeline, TrainsAModelLikeTheBatchIterator) {
  Tensor x = randn({128, 2});
  Tensor y = cast(gt(x.select(1, 0), zeros({128})), DType::Int64);
  data::Pipeline p(std::make_shared<data::TensorDataset>(x, y));
  p.shuffle(3).batch(16).num_parallel_workers(2);
  manual_seed(0);
  auto net = std::make_shared<nn::Dense>(2, 2);
  train::Model model(net, std::make_shared<nn::CrossEntropyLoss>(),
                     std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.5}));
  model.train(5, p);
  data::Pipeline eval(std::make_shared<data::TensorDataset>(x, y));
  eval.batch(64);
  EXPECT_GT(model.eval(eval).accuracy, 0.9);
}

TEST(DistributedSampler, ShardsAreDisjointEqualAndCoverTheData) {
  std::set<int64_t> seen;
  size_t per_shard = 0;
  for (int64_t shard = 0; shard < 3; ++shard) {
    data::DistributedSampler s(3, shard, /*shuffle=*/true, /*seed=*/4);
    auto idx = s.indices(10, 0);
    if (shard == 0) per_shard = idx.size();
    EXPECT_EQ(idx.size(), per_shard);
    seen.insert(idx.begin(), idx.end());
    EXPECT_NE(idx, s.indices(10, 1));
  }
  EXPECT_EQ(per_shard, 4u);  // 10 samples over 3 shards: padded to 12
  EXPECT_EQ(seen.size(), 10u);
  data::DistributedSampler a(2, 0, false), b(2, 1, false);
  EXPECT_EQ(a.indices(5, 0), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(b.indices(5, 0), (std::vector<int64_t>{1, 3, 0}));
  EXPECT_THROW(data::DistributedSampler(2, 2), Error);
  // Unpadded (evaluation): every sample exactly once, the last shards shorter.
  data::DistributedSampler c(3, 0, false, 0, /*pad=*/false), d(3, 2, false, 0, /*pad=*/false);
  EXPECT_EQ(c.indices(5, 0), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(d.indices(5, 0), (std::vector<int64_t>{2}));
  EXPECT_EQ(d.count(5), 1);
}

TEST(DistributedSampler, ShardedBatchesTogetherAreTheGlobalBatchWhateverTheRankCount) {
  // What data-parallel training and resuming with another rank count rely on:
  // batch k of every shard of batch B/N, together, is batch k of one process.
  Tensor x = arange(0, 48, 1, DType::Int64).reshape({48, 1});
  data::TensorDataset ds(x, x.reshape({48}));
  data::BatchIterator whole(ds, 12, /*shuffle=*/true, false, /*seed=*/5);
  std::vector<std::set<int64_t>> global;
  data::Batch b;
  while (whole.next(b)) {
    auto v = b.labels.to_vector<int64_t>();
    global.emplace_back(v.begin(), v.end());
  }
  for (int64_t ranks : {2, 3, 4}) {
    std::vector<std::set<int64_t>> together(global.size());
    for (int64_t r = 0; r < ranks; ++r) {
      data::BatchIterator mine(ds, 12 / ranks, true, false, 5);
      mine.shard(ranks, r);
      EXPECT_EQ(mine.batches_per_epoch(), 4);
      for (size_t k = 0; mine.next(b); ++k)
        for (int64_t v : b.labels.to_vector<int64_t>()) together[k].insert(v);
    }
    EXPECT_EQ(together, global) << ranks << " ranks";
  }
}

TEST(Subset, RandomSplitIsDisjointSeededAndComplete) {
  auto ds = counting(20);
  auto [train, held] = data::random_split(ds, 0.25, 7);
  EXPECT_EQ(train->size(), 15);
  EXPECT_EQ(held->size(), 5);
  std::set<int64_t> seen;
  for (auto* part : {train.get(), held.get()})
    for (int64_t i = 0; i < part->size(); ++i) seen.insert(part->get(i).label.item<int64_t>());
  EXPECT_EQ(seen.size(), 20u);
  auto again = data::random_split(ds, 0.25, 7);
  EXPECT_EQ(again.second->get(0).label.item<int64_t>(), held->get(0).label.item<int64_t>());
  EXPECT_THROW(data::random_split(ds, 1.0, 0), Error);
  EXPECT_THROW(data::Subset(ds, {20}), Error);
}

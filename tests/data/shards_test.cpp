// WebDataset-style shards: patterns, the writer and reader, and the batch
// source that streams them (epochs, shuffling, ranks, evaluation splits).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "kiln/kiln.h"
#include "support/error_message.h"
#include "support/job_files.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {

// `count` grey 4x4 images, sample i all pixels i and class i % 10, in
// shards of `per_shard` samples (set-000000.tar, ...); returns their pattern.
std::string make_shards(const std::string& dir, int count, int per_shard) {
  int shard = 0;
  for (int first = 0; first < count; first += per_shard, ++shard) {
    char name[64];
    std::snprintf(name, sizeof name, "%s/set-%06d.tar", dir.c_str(), shard);
    data::ShardWriter w(dir + "/tmp", int64_t{1} << 40, [&](const std::string& path, int64_t, int64_t) {
      std::filesystem::rename(path, name);
    });
    for (int i = first; i < std::min(count, first + per_shard); ++i) {
      Tensor image = Tensor::empty({4, 4, 1}, DType::UInt8);
      std::fill(image.data<uint8_t>(), image.data<uint8_t>() + 16, static_cast<uint8_t>(i));
      auto png = data::encode_png(image);
      char key[32];
      std::snprintf(key, sizeof key, "s/%05d", i);
      w.add(key, {{"cls", std::to_string(i % 10)}, {"png", std::string(png.begin(), png.end())}});
    }
    w.finish();
  }
  char last[16];
  std::snprintf(last, sizeof last, "%06d", shard - 1);
  return dir + "/set-{000000.." + last + "}.tar";
}

// The pixel value of each sample an epoch delivers (its index).
std::vector<int> epoch_of(data::BatchSource& source) {
  std::vector<int> seen;
  source.start_epoch();
  data::Batch b;
  while (source.next(b)) {
    EXPECT_EQ(b.inputs.shape()[1], 1);  // [N, C, H, W] after hwc_to_chw
    for (int64_t i = 0; i < b.inputs.shape()[0]; ++i) {
      const int v = b.inputs.contiguous().data<uint8_t>()[i * 16];
      seen.push_back(v);
      EXPECT_EQ(b.labels.data<int64_t>()[i], seen.back() % 10);
    }
  }
  return seen;
}

data::ShardSourceOptions options(int64_t batch, bool shuffle, int64_t rank = 0, int64_t ranks = 1) {
  data::ShardSourceOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = 7;
  o.rank = rank;
  o.ranks = ranks;
  o.channels = 1;
  o.shuffle_buffer = 16;
  o.transforms = {data::vision::hwc_to_chw()};
  return o;
}

}  // namespace

TEST(Shards, PatternsExpandWithTheirWidth) {
  EXPECT_EQ(data::expand_shard_pattern("a-{000008..000010}.tar"),
            (std::vector<std::string>{"a-000008.tar", "a-000009.tar", "a-000010.tar"}));
  EXPECT_EQ(data::expand_shard_pattern("x/{1..2}-{0..1}"), (std::vector<std::string>{"x/1-0", "x/1-1", "x/2-0", "x/2-1"}));
  EXPECT_EQ(data::expand_shard_pattern("plain.tar"), std::vector<std::string>{"plain.tar"});
  EXPECT_NE(message_of([] { data::expand_shard_pattern("a-{3..1}.tar"); }).find("backwards"), std::string::npos);
  EXPECT_NE(message_of([] { data::expand_shard_pattern("a-{1,2}.tar"); }).find("{000000..000009}"), std::string::npos);
  EXPECT_EQ(data::split_sample_name("train/a.b/00042.seg.png"), std::make_pair(std::string("train/a.b/00042"),
                                                                               std::string("seg.png")));
}

TEST(Shards, TheSourceStreamsEachSampleOncePerEpochInASeededOrder) {
  auto dir = kiln::testing::fresh_dir("shards_epoch");
  const std::string pattern = make_shards(dir, 100, 16);  // 7 shards, the last one short
  auto index = data::index_shards(pattern);               // no index file: counted
  ASSERT_EQ(index.shards.size(), 7u);
  EXPECT_EQ(index.total(), 100);
  // Evaluation: in order, all of it, a short last batch.
  data::ShardSource eval(index, options(32, false));
  EXPECT_EQ(eval.batches_per_epoch(), 4);
  std::vector<int> in_order(100);
  for (int i = 0; i < 100; ++i) in_order[static_cast<size_t>(i)] = i;
  EXPECT_EQ(epoch_of(eval), in_order);
  // Training: shuffled across and within shards, a new order each epoch,
  // the same orders again from the same seed.
  data::ShardSource train(index, options(10, true));
  auto first = epoch_of(train), second = epoch_of(train);
  EXPECT_EQ(first.size(), 100u);
  EXPECT_EQ(std::set<int>(first.begin(), first.end()).size(), 100u);
  EXPECT_NE(first, in_order);
  EXPECT_NE(first, second);
  data::ShardSource again(index, options(10, true));
  EXPECT_EQ(epoch_of(again), first);
  // Stopping mid-epoch and starting the next is fine.
  data::Batch b;
  again.start_epoch();
  ASSERT_TRUE(again.next(b));
  EXPECT_EQ(epoch_of(again).size(), 100u);
}

TEST(Shards, RanksTrainOnDisjointShardsAndEvaluateOnDisjointSamples) {
  auto dir = kiln::testing::fresh_dir("shards_ranks");
  auto index = data::index_shards(make_shards(dir, 96, 12));  // 8 shards
  std::set<int> all;
  for (int rank = 0; rank < 2; ++rank) {
    data::ShardSource train(index, options(8, true, rank, 2));
    EXPECT_EQ(train.batches_per_epoch(), 6);  // 48 samples each
    auto seen = epoch_of(train);
    EXPECT_EQ(seen.size(), 48u);
    all.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(all.size(), 96u);  // together, every sample once
  std::multiset<int> evaluated;
  for (int rank = 0; rank < 3; ++rank) {  // more ranks than evaluation needs shards for
    data::ShardSource eval(index, options(64, false, rank, 3));
    auto seen = epoch_of(eval);
    evaluated.insert(seen.begin(), seen.end());
  }
  EXPECT_EQ(evaluated.size(), 96u);
  EXPECT_EQ(std::set<int>(evaluated.begin(), evaluated.end()).size(), 96u);
  EXPECT_NE(message_of([&] { data::ShardSource(index, options(8, true, 0, 9)); }).find("smaller --shard-size"),
            std::string::npos);
}

TEST(Shards, DamagedShardsAndSamplesAreNamed) {
  auto dir = kiln::testing::fresh_dir("shards_bad");
  make_shards(dir, 4, 4);
  std::string tar;
  {
    std::ifstream in(dir + "/set-000000.tar", std::ios::binary);
    tar.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(dir + "/cut-000000.tar", std::ios::binary) << tar.substr(0, 700);
  EXPECT_NE(message_of([&] { data::index_shards(dir + "/cut-{000000..000000}.tar"); }).find("cut-000000.tar"),
            std::string::npos);
  EXPECT_NE(message_of([&] { data::index_shards(dir + "/none-{000000..000001}.tar"); }).find("none-000000.tar"),
            std::string::npos);
  data::ShardWriter w(dir + "/nolabel", 1 << 20, [](const std::string&, int64_t, int64_t) {});
  w.add("a", {{"png", "not really"}});
  w.finish();
  auto index = data::index_shards(dir + "/nolabel-{000000..000000}.tar");
  data::ShardSource source(index, options(1, false));
  EXPECT_NE(message_of([&] { source.first_sample(); }).find("sample 'a' needs an image"), std::string::npos);
}

#pragma once
// Samplers decide which dataset indices an epoch visits, and in what order.
// They are pure functions of (dataset size, epoch), so any number of workers
// and any restart see the same order.
#include <cstdint>
#include <vector>

namespace kiln::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const = 0;
  // How many indices an epoch has (samplers that know it without drawing
  // the order override this).
  virtual int64_t count(int64_t dataset_size) const { return static_cast<int64_t>(indices(dataset_size, 0).size()); }
};

// 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  std::vector<int64_t> indices(int64_t n, int64_t epoch) const override;
  int64_t count(int64_t n) const override { return n; }
};

// A permutation that changes every epoch and is fixed by the seed.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(uint64_t seed) : seed_(seed) {}
  std::vector<int64_t> indices(int64_t n, int64_t epoch) const override;
  int64_t count(int64_t n) const override { return n; }

 private:
  uint64_t seed_;
};

// One shard of `num_shards` for data-parallel training: shard k takes
// positions k, k + num_shards, ... of the epoch's order, which all shards
// agree on because they share the seed (so batch i of every shard together
// is batch i of one process with num_shards times the batch, whatever the
// number of shards). With `pad`, every shard sees the same number of
// samples (the order is padded by wrapping around, as PyTorch's
// DistributedSampler does); without, each sample is seen exactly once
// (evaluation), and the last shards may have one fewer.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t num_shards, int64_t shard_id, bool shuffle = true, uint64_t seed = 0, bool pad = true);
  std::vector<int64_t> indices(int64_t n, int64_t epoch) const override;
  int64_t count(int64_t n) const override {
    if (n <= 0) return 0;
    return pad_ ? (n + num_shards_ - 1) / num_shards_ : (n - shard_id_ + num_shards_ - 1) / num_shards_;
  }

 private:
  int64_t num_shards_, shard_id_;
  bool shuffle_;
  uint64_t seed_;
  bool pad_;
};

// Mixes seeds into one (splitmix64), for per-epoch and per-sample streams.
uint64_t mix_seed(uint64_t a, uint64_t b);

}  // namespace kiln::data

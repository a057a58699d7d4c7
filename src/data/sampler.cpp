#include "kiln/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "kiln/error.h"

namespace kiln::data {

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9e3779b97f4a7c15ULL * (b + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

namespace {
std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order = identity(n);
  std::mt19937_64 engine(mix_seed(seed, static_cast<uint64_t>(epoch)));
  std::shuffle(order.begin(), order.end(), engine);
  return order;
}
}  // namespace

std::vector<int64_t> SequentialSampler::indices(int64_t n, int64_t) const { return identity(n); }

std::vector<int64_t> RandomSampler::indices(int64_t n, int64_t epoch) const { return permutation(n, seed_, epoch); }

DistributedSampler::DistributedSampler(int64_t num_shards, int64_t shard_id, bool shuffle, uint64_t seed, bool pad)
    : num_shards_(num_shards), shard_id_(shard_id), shuffle_(shuffle), seed_(seed), pad_(pad) {
  KILN_CHECK(num_shards >= 1 && shard_id >= 0 && shard_id < num_shards, "DistributedSampler: shard_id ", shard_id,
             " is not in [0, num_shards = ", num_shards, ")");
}

std::vector<int64_t> DistributedSampler::indices(int64_t n, int64_t epoch) const {
  if (n <= 0) return {};
  std::vector<int64_t> all = shuffle_ ? permutation(n, seed_, epoch) : identity(n);
  int64_t per_shard = count(n);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_shard));
  for (int64_t i = shard_id_; static_cast<int64_t>(mine.size()) < per_shard; i += num_shards_)
    mine.push_back(all[static_cast<size_t>(i % n)]);  // wraps around to pad the last shards
  return mine;
}

}  // namespace kiln::data

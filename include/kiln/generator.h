#pragma once
// Seedable random numbers for rand/randn/randint, dropout, initialization
// and data transforms: a counter-based generator (Philox4x32-10), so that a
// tensor's numbers are a function of the seed and where the draw starts,
// the same on every backend. A generator's state is its seed and the next
// unused counter.
#include <cstdint>
#include <limits>

namespace kiln {

class Generator {
 public:
  using result_type = uint64_t;
  explicit Generator(uint64_t seed = 0x4b494c4e) : seed_(seed) {}
  // Starts the stream of `s` over.
  void seed(uint64_t s) {
    seed_ = s;
    offset_ = 0;
  }
  uint64_t initial_seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Puts the generator where another was (a checkpoint's state).
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Takes the counters of a draw of n numbers and returns the first: number
  // i of the draw is philox's (seed, first, i), whoever computes it.
  uint64_t take(uint64_t n) { return take_counters(counters(n)); }
  // The counters a draw of n numbers uses (philox gives two per counter).
  static uint64_t counters(uint64_t n) { return (n + 1) / 2; }
  // Takes `count` counters (the draws of several ops at once) and returns the first.
  uint64_t take_counters(uint64_t count) {
    const uint64_t first = offset_;
    offset_ += count;
    return first;
  }
  // One 64-bit number, for choices made on the host (shuffles, transforms);
  // with min() and max(), a generator for <random>'s distributions.
  uint64_t next();
  uint64_t operator()() { return next(); }
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return std::numeric_limits<uint64_t>::max(); }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace kiln

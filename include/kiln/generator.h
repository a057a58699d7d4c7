#pragma once
// Seedable random number generation for rand/randn/randint, dropout and init.
#include <cstdint>
#include <random>

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x4b494c4e) : engine_(seed) {}
  void seed(uint64_t s) { engine_.seed(s); }
  std::mt19937_64& engine() { return engine_; }
  uint64_t next() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// The process-wide generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace kiln

#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): a counter-based generator. Number i of a draw depends only on the
// seed, the draw's first counter and i, so any backend computes the same
// numbers in any order: rand on the CPU and on a device, and dropout masks,
// agree for one seed. Plain C++ a device compiler takes as it is.
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace kiln::philox {

struct Block {
  uint32_t w[4];
};

// The four words of counter `counter` under key `seed`.
KILN_HOST_DEVICE inline Block block(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c0, p1 = uint64_t{0xCD9E8D57} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Counters a draw of n numbers takes: two numbers per counter.
KILN_HOST_DEVICE inline uint64_t counters_for(uint64_t n) { return (n + 1) / 2; }

// 53 bits of two words as a double in [0, 1).
KILN_HOST_DEVICE inline double unit(uint32_t hi, uint32_t lo) {
  return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1.0p-53;
}

// Number i of the uniform draw [0, 1) starting at counter `first`.
KILN_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t first, uint64_t i) {
  const Block b = block(seed, first + i / 2);
  return i % 2 == 0 ? unit(b.w[0], b.w[1]) : unit(b.w[2], b.w[3]);
}

// Number i of the standard normal draw starting at counter `first`: pairs
// from Box-Muller over the counter's two uniforms.
KILN_HOST_DEVICE inline double normal(uint64_t seed, uint64_t first, uint64_t i) {
  const Block b = block(seed, first + i / 2);
  const double u1 = 1.0 - unit(b.w[0], b.w[1]);  // (0, 1]: the logarithm stays finite
  const double u2 = unit(b.w[2], b.w[3]);
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double angle = 6.283185307179586 * u2;
  return i % 2 == 0 ? r * std::cos(angle) : r * std::sin(angle);
}

// Number i of the integer draw in [low, high) starting at counter `first`:
// the uniform number scaled, so randint takes the counters rand does.
KILN_HOST_DEVICE inline int64_t integer(uint64_t seed, uint64_t first, uint64_t i, int64_t low, int64_t high) {
  const double span = static_cast<double>(high) - static_cast<double>(low);
  const int64_t v = low + static_cast<int64_t>(uniform(seed, first, i) * span);
  return v < high ? v : high - 1;
}

// Whether dropout keeps element i of a tensor whose mask draw starts at
// `first`: the same mask on every backend for one seed.
KILN_HOST_DEVICE inline bool keeps(uint64_t seed, uint64_t first, uint64_t i, double keep_probability) {
  return uniform(seed, first, i) < keep_probability;
}

}  // namespace kiln::philox

#include "kiln/generator.h"

#include "core/philox.h"

namespace kiln {

uint64_t Generator::next() {
  const philox::Block b = philox::block(seed_, take(2));
  return (uint64_t{b.w[0]} << 32) | b.w[1];
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().seed(seed); }

}  // namespace kiln

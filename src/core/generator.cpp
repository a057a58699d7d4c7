#include "kiln/generator.h"

namespace kiln {

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().seed(seed); }

}  // namespace kiln

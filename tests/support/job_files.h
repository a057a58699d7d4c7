#pragma once
// Files of the distributed tests' jobs: a fresh folder, a file's text, and
// how far two checkpoints' parameters lie apart.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "kiln/io.h"
#include "support/scratch.h"

namespace kiln::testing {

// An empty folder of its own under the temp folder, removed at exit.
inline std::string fresh_dir(const std::string& name) { return scratch_dir(name).string(); }

// The whole file ("" when it cannot be read).
inline std::string text_of(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path).rdbuf();
  return s.str();
}

// The largest difference between same-named float32 tensors of two
// checkpoints; infinity when their names differ.
inline double largest_difference(const std::string& a_path, const std::string& b_path) {
  io::MappedSafetensors a(a_path), b(b_path);
  if (a.entries().size() != b.entries().size()) return INFINITY;
  double worst = 0;
  for (const auto& e : a.entries()) {
    const auto* other = b.find(e.name);
    if (!other) return INFINITY;
    auto x = a.tensor(e).to_vector<float>(), y = b.tensor(*other).to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, double(std::abs(x[i] - y[i])));
  }
  return worst;
}

}  // namespace kiln::testing

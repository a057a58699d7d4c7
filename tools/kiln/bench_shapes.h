#pragma once
// The input shapes `kiln bench` times: --shape NAME=DIMS, with DIMS such as
// 1x37, and one axis of one input a range (1x20..59), timed in turn as a
// server sees its requests' lengths.
#include <map>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::cli {

struct BenchShapes {
  std::vector<std::map<std::string, Shape>> sets;  // every input's shape, one set per length of the range
  std::string label;                               // the specs as given, for the report
  std::vector<std::string> set_labels;             // each set's ranged input, "in0=1x37" (empty without a range)
};

// Checks every spec against the model's inputs (names, ranks, fixed sizes);
// an input without a spec must have a fully known shape.
BenchShapes parse_bench_shapes(const std::vector<std::string>& specs, const std::vector<TensorInfo>& inputs);

}  // namespace kiln::cli

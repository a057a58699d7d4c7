#pragma once
// Symbolic dimensions: a graph compiled for one size of its dynamic input
// axes, generalized to every size. Each dimension of each value and each
// integer attribute (a view's shape, a slice's end) is an affine function of
// the symbols (the dynamic axes' sizes), found by compiling probes at other
// sizes and comparing them with the graph: where they are the same graph but
// for those numbers, the graph at any other size is the same nodes and
// kernels with the numbers worked out, with no tracing and no passes. Graphs
// whose structure or constants change with the sizes (a loop unrolled per
// length, positions folded into a constant), or whose kernels are built for
// one shape, are not generalized, and the reason is kept.
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace kiln::graph {

// c + sum of k[i] * symbol i.
struct AffineDim {
  int64_t c = 0;
  std::vector<int64_t> k;
  int64_t at(const std::vector<int64_t>& sizes) const;
  bool fixed() const;
};

struct SymbolicShapes {
  std::vector<int64_t> base;                    // the symbols' sizes in the compiled graph
  std::vector<std::vector<AffineDim>> dims;     // per value, per axis
  struct IntAttr {
    int node;
    std::string name;
    int element;  // -1: an int attribute; else that element of an ints one
    AffineDim value;
  };
  std::vector<IntAttr> attrs;                   // those that depend on the symbols
};

// The graph `base` (compiled at sizes base_sizes) generalized from probes:
// probes[i] compiled with symbol i moved by `step` (1 or -1), and `check`
// with every symbol moved by 2 step, which the result must predict. Null,
// with the reason in *why, when they are not one graph.
std::optional<SymbolicShapes> generalize(const Graph& base, const std::vector<int64_t>& base_sizes, int64_t step,
                                         const std::vector<const Graph*>& probes, const Graph& check, std::string* why);

// The generalized graph at these sizes: every value's shape and every
// dependent attribute worked out, the registry ops' shapes checked by their
// own inference. Null, with the reason in *why, when a size comes out
// negative or an op disagrees (the sizes are outside what the probes told).
std::optional<Graph> instantiate(const Graph& base, const SymbolicShapes& s, const std::vector<int64_t>& sizes,
                                 std::string* why);

}  // namespace kiln::graph

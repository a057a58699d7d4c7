#pragma once
// Liveness-based placement of every buffer the graph produces into one arena.
#include <cstdint>
#include <optional>
#include <vector>

#include "graph/ir.h"

namespace kiln::graph {

struct MemoryPlan {
  std::vector<int64_t> offset;  // per value: byte offset in the arena, -1 when not in it
  std::vector<int> alias_of;    // per value: the arena value a view aliases (itself otherwise, -1 none)
  int64_t arena_bytes = 0;
  int64_t unshared_bytes = 0;   // what the same buffers take without reuse
};

// Graph inputs and the outputs of non-view nodes get arena space; a buffer is
// live from its definition to the last use of it or of any view of it (graph
// outputs until the end). Buffers whose lives overlap never share bytes.
// With `only`, the arena is that device's: values elsewhere get no offset.
MemoryPlan plan_memory(const Graph& g, std::optional<Device> only = std::nullopt);

}  // namespace kiln::graph

#include "graph/memory_plan.h"

#include <algorithm>

namespace kiln::graph {
namespace {

constexpr int64_t kAlign = 64;
// Every buffer gets a few cache lines of slack, so buffers of power-of-two
// sizes placed side by side do not all start on the same cache sets (measured:
// W4's attention matmuls ran ~10% slower without it).
constexpr int64_t kStagger = 4 * kAlign;

int64_t bytes_of(const TensorMeta& m) {
  int64_t n = numel_of(m.shape) * static_cast<int64_t>(dtype_size(m.dtype));
  return (std::max<int64_t>(n, 1) + kAlign - 1) / kAlign * kAlign + kStagger;
}

}  // namespace

MemoryPlan plan_memory(const Graph& g, std::optional<Device> only) {
  const size_t nv = g.values.size();
  MemoryPlan plan;
  plan.offset.assign(nv, -1);
  plan.alias_of.assign(nv, -1);
  std::vector<int> first(nv, -1), last(nv, -1);
  for (int id : g.inputs) {
    plan.alias_of[id] = id;
    first[id] = last[id] = -1;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.removed) continue;
    const int at = static_cast<int>(i);
    for (int id : n.inputs)
      if (id >= 0 && plan.alias_of[id] >= 0) last[plan.alias_of[id]] = std::max(last[plan.alias_of[id]], at);
    for (int id : n.outputs) {
      if (n.is_view()) {
        plan.alias_of[id] = n.inputs[0] >= 0 ? plan.alias_of[n.inputs[0]] : -1;
      } else {
        plan.alias_of[id] = id;
        first[id] = last[id] = at;
      }
    }
  }
  const int end = static_cast<int>(g.nodes.size());
  for (int id : g.outputs)
    if (plan.alias_of[id] >= 0) last[plan.alias_of[id]] = end;
  // Values written in place stay live to the end of the graph (the write is a use).
  auto mutated = g.mutated_values();
  for (size_t id = 0; id < nv; ++id)
    if (mutated[id] && plan.alias_of[id] >= 0) last[plan.alias_of[id]] = end;
  // An output may take over the buffer of an input that dies at its node.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.removed || n.inplace_input < 0 || n.outputs.size() != 1 || n.is_view()) continue;
    const int out = n.outputs[0];
    const int root = plan.alias_of[n.inputs[n.inplace_input]];
    if (root < 0 || g.values[root].kind != ValueKind::Result || mutated[root] || last[root] != static_cast<int>(i) ||
        bytes_of(g.values[root].meta) != bytes_of(g.values[out].meta))
      continue;
    // Not when another input reads the same buffer (y = conv(x) + x): the
    // kernel would overwrite what it still reads.
    bool read_elsewhere = false;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      read_elsewhere |= static_cast<int>(k) != n.inplace_input && n.inputs[k] >= 0 && plan.alias_of[n.inputs[k]] == root;
    if (read_elsewhere) continue;
    for (size_t id = 0; id < nv; ++id)
      if (plan.alias_of[id] == out) plan.alias_of[id] = root;
    last[root] = last[out];
  }

  struct Buffer {
    int id;
    int64_t size, begin, end;
  };
  std::vector<Buffer> buffers;
  for (size_t id = 0; id < nv; ++id)
    if (plan.alias_of[id] == static_cast<int>(id) && (!only || g.values[id].meta.device == *only))
      buffers.push_back({static_cast<int>(id), bytes_of(g.values[id].meta), first[id], last[id]});
  // Largest first, each at the lowest offset free for its whole life.
  std::stable_sort(buffers.begin(), buffers.end(), [](const Buffer& a, const Buffer& b) { return a.size > b.size; });
  std::vector<const Buffer*> placed;
  for (Buffer& b : buffers) {
    plan.unshared_bytes += b.size;
    std::vector<std::pair<int64_t, int64_t>> taken;  // [offset, offset + size) of overlapping lives
    for (const Buffer* p : placed)
      if (p->begin <= b.end && b.begin <= p->end) taken.push_back({plan.offset[p->id], plan.offset[p->id] + p->size});
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;
    for (auto& [lo, hi] : taken) {
      if (lo - at >= b.size) break;
      at = std::max(at, hi);
    }
    plan.offset[b.id] = at;
    plan.arena_bytes = std::max(plan.arena_bytes, at + b.size);
    placed.push_back(&b);
  }
  // Outputs that took over an input's buffer start where it starts.
  for (size_t id = 0; id < nv; ++id) {
    const int root = plan.alias_of[id];
    if (root < 0 || root == static_cast<int>(id) || g.values[id].kind != ValueKind::Result || plan.offset[root] < 0) continue;
    if (!g.nodes[g.values[id].producer].is_view()) plan.offset[id] = plan.offset[root];
  }
  return plan;
}

}  // namespace kiln::graph

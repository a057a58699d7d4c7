// Inference: a multi-head layer's attention output [.., H, L, Dv] is read
// by a transpose to [.., L, H, Dv] that a copy makes contiguous for the
// output projection (what torch.onnx.export writes, and Kiln's own
// MultiheadAttention). The attention kernel writes that layout itself, and
// the copy goes (18 us a layer at 8 x 128 x 32 on two cores).
#include "backends/cpu/attention_forward.h"
#include "backends/cpu/passes/cpu_passes.h"

namespace kiln::graph {
namespace {

// Whether `order` swaps axes rank - 3 and rank - 2 and keeps the others.
bool swaps_heads_and_positions(const std::vector<int64_t>& order, size_t rank) {
  if (rank < 3 || order.size() != rank) return false;
  for (size_t d = 0; d < rank; ++d) {
    const size_t from = d == rank - 3 ? rank - 2 : d == rank - 2 ? rank - 3 : d;
    if (order[d] != static_cast<int64_t>(from)) return false;
  }
  return true;
}

}  // namespace

std::string write_attention_heads_interleaved(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const std::vector<bool> mutated = g.mutated_values();
  size_t rewritten = 0;
  for (size_t at = 0; at < g.nodes.size(); ++at) {
    Node& a = g.nodes[at];
    if (!a.is_op("attention") || a.attrs.get_bool("save_weights", false) || a.outputs.empty()) continue;
    const int y = a.outputs[0];
    const size_t rank = g.values[y].meta.shape.size();
    const DType dtype = g.values[y].meta.dtype;
    if (rank < 3 || (dtype != DType::Float32 && dtype != DType::Float64) || mutated[y]) continue;
    const int p_at = g.sole_reader(y, uses);
    if (p_at < 0 || !g.nodes[p_at].is_op("permute") ||
        !swaps_heads_and_positions(g.nodes[p_at].attrs.get_ints("order", {}), rank))
      continue;
    const int permuted = g.nodes[p_at].outputs[0];
    const int c_at = mutated[permuted] ? -1 : g.sole_reader(permuted, uses);
    if (c_at < 0 || !g.nodes[c_at].is_op("copy")) continue;
    const int z = g.nodes[c_at].outputs[0];
    if (mutated[z] || g.values[z].meta.shape != g.values[permuted].meta.shape || g.values[z].meta.dtype != dtype)
      continue;
    const Attrs attrs = a.attrs;
    a.custom = [attrs](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      cpu::attention_forward(in, out, attrs, true);
    };
    a.fused_from = a.op;
    a.op = nullptr;
    a.label = "attention (heads interleaved)";
    a.any_shape = true;  // every size from its tensors
    a.outputs[0] = z;
    g.values[z].producer = static_cast<int>(at);
    g.nodes[p_at].removed = g.nodes[c_at].removed = true;
    ++rewritten;
  }
  return rewritten ? std::to_string(rewritten) + " attention layers write their heads interleaved (no copy after)" : "";
}

}  // namespace kiln::graph

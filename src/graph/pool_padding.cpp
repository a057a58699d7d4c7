// Inference: a zero padding of the spatial axes that only an average pool
// reads becomes the pool's own padding, counted in its averages. PyTorch
// exports avg_pool2d(padding=1) so (a Pad, then an AveragePool without
// pads): Inception's branches. The pad then kept the pool off the blocked
// layouts around it, with a reorder each way, on plain loops.
#include "graph/passes.h"

#include "ops/pool_attrs.h"

namespace kiln::graph {
namespace {


// The pad's [before, after] amounts of H and W, when it pads those two axes of
// a 4-d value only, with zeros, as much before as after; else empty.
std::vector<int64_t> spatial_zero_padding(const Graph& g, const Node& pad) {
  if (pad.attrs.get_string("mode", "constant") != "constant" || pad.attrs.get_float("value", 0.0) != 0.0 ||
      g.values[pad.inputs[0]].meta.shape.size() != 4)
    return {};
  // Pairs from the last axis back: [w_before, w_after, h_before, h_after, (c, n: zeros)].
  const std::vector<int64_t> pads = pad.attrs.get_ints("pads");
  if (pads.size() < 4 || pads.size() % 2 != 0) return {};
  for (size_t i = 4; i < pads.size(); ++i)
    if (pads[i] != 0) return {};
  if (pads[0] != pads[1] || pads[2] != pads[3] || pads[0] < 0 || pads[2] < 0) return {};
  return {pads[2], pads[0]};
}

}  // namespace

std::string fold_padding_into_pools(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  size_t folded = 0;
  for (Node& pool : g.nodes) {
    if (!pool.is_op("avg_pool2d") || pool.inputs.empty()) continue;
    const int padded = pool.inputs[0];
    const int at = g.values[padded].producer;
    if (at < 0 || uses[padded] != 1 || !g.nodes[at].is_op("pad")) continue;
    const std::vector<int64_t> amount = spatial_zero_padding(g, g.nodes[at]);
    const Pool2dAttrs a = Pool2dAttrs::of(pool.attrs);
    // A pool's padding is at most half its window (as PyTorch and ONNX have it).
    if (amount.empty() || a.padding[0] != 0 || a.padding[1] != 0 || a.ceil_mode || 2 * amount[0] > a.kernel[0] ||
        2 * amount[1] > a.kernel[1])
      continue;
    pool.inputs[0] = g.nodes[at].inputs[0];
    pool.attrs.set("padding", amount);
    pool.attrs.set("count_include_pad", true);
    g.nodes[at].removed = true;
    ++folded;
  }
  return folded ? std::to_string(folded) + " zero paddings into the average pools after them" : "";
}

}  // namespace kiln::graph

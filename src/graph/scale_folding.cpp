// Inference: a constant per-feature (or single) factor on a linear layer's
// output, through permutes, becomes part of the layer's weights and bias:
// s * (x W^T + b) = x (s W)^T + s b. ConvNeXt's layer scale (gamma * the
// block's output, after the permute back to NCHW) was a pass over the
// activations of every block, 0.7 ms of a 25 ms ConvNeXt-T.
#include "graph/passes.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"

namespace kiln::graph {
namespace {

// The factor as one value per output feature of the linear layer ([O]),
// when `s` broadcast over `v` varies along `axis` only (the axis the
// features went to) or not at all; else undefined.
Tensor per_feature(const Tensor& s, const Shape& v, int64_t axis, int64_t features) {
  const Shape& shape = s.shape();
  if (shape.size() > v.size()) return Tensor();
  const int64_t offset = static_cast<int64_t>(v.size() - shape.size());
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    const int64_t at = i + offset;
    if (shape[i] != 1 && (at != axis || shape[i] != features)) return Tensor();
  }
  const Tensor flat = s.contiguous().reshape({s.numel()});
  return s.numel() == 1 ? flat.expand({features}).contiguous() : flat;
}

}  // namespace

std::string fold_scales_into_linears(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const std::vector<bool> mutated = g.mutated_values();
  size_t folded = 0;
  NoGradGuard no_grad;
  for (Node& mul : g.nodes) {
    if (!mul.is_op("mul") || mul.inputs.size() != 2) continue;
    const int out = mul.outputs[0];
    for (int side = 0; side < 2; ++side) {
      const int v = mul.inputs[side], s = mul.inputs[1 - side];
      if (!is_constant(g, s) || g.values[v].meta.shape != g.values[out].meta.shape ||
          g.values[s].meta.dtype != g.values[out].meta.dtype)
        continue;
      // Back through permutes to the linear layer, following where its
      // feature axis goes.
      int y = v;
      std::vector<std::vector<int64_t>> orders;
      while (g.values[y].kind == ValueKind::Result && uses[y] == 1 && !mutated[y] &&
             g.nodes[g.values[y].producer].is_op("permute")) {
        const Node& p = g.nodes[g.values[y].producer];
        orders.push_back(p.attrs.get_ints("order", {}));
        y = p.inputs[0];
      }
      if (g.values[y].kind != ValueKind::Result || uses[y] != 1 || mutated[y]) continue;
      Node& linear = g.nodes[g.values[y].producer];
      if (!linear.is_op("linear") || linear.inputs.size() < 2 || !is_constant(g, linear.inputs[1])) continue;
      const bool bias = linear.inputs.size() > 2 && linear.inputs[2] >= 0;
      if (bias && !is_constant(g, linear.inputs[2])) continue;
      int64_t axis = static_cast<int64_t>(g.values[y].meta.shape.size()) - 1;
      for (auto o = orders.rbegin(); o != orders.rend(); ++o) {
        int64_t moved = -1;
        for (size_t i = 0; i < o->size(); ++i)
          if ((*o)[i] == axis) moved = static_cast<int64_t>(i);
        axis = moved;
      }
      const Tensor& w = g.values[linear.inputs[1]].tensor;
      const int64_t features = w.shape()[0];
      const Tensor scale =
          axis < 0 ? Tensor() : per_feature(g.values[s].tensor, g.values[v].meta.shape, axis, features);
      if (!scale.defined()) continue;
      linear.inputs[1] = add_constant(g, (w * scale.reshape({features, 1})).contiguous(), "scaled_weight");
      if (bias)
        linear.inputs[2] = add_constant(g, (g.values[linear.inputs[2]].tensor * scale).contiguous(), "scaled_bias");
      replace_uses(g, out, v);
      mul.removed = true;
      ++folded;
      break;
    }
  }
  return folded ? std::to_string(folded) + " constant factors into the weights of the linear layers before them" : "";
}

}  // namespace kiln::graph

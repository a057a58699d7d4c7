// Inference: attention written as separate ops (what torch.onnx.export and
// other exporters write: MatMul(Q, K^T), a scale, an additive mask or a
// masked_fill with -inf, Softmax, MatMul with V; Swin's two constant masks
// with views between) becomes one attention op,
// whose kernel never writes the [L, S] scores. A masked_fill of the upper
// triangle (GPT-style decoders) becomes the op's causal flag.
#include <algorithm>
#include <cmath>
#include <limits>

#include "graph/passes.h"
#include "kiln/functional.h"
#include "kiln/grad_mode.h"

namespace kiln::graph {
namespace {

bool is(const Node& n, const char* name) { return n.op && n.computes(name); }

// The value's producer when it is a node result read by nothing else; null otherwise.
Node* sole_producer(Graph& g, const std::vector<int>& uses, const std::vector<bool>& mutated, int value) {
  if (value < 0 || g.values[value].kind != ValueKind::Result || uses[value] != 1 || mutated[value]) return nullptr;
  return &g.nodes[g.values[value].producer];
}

// n scales x by a constant scalar (x * c, c * x or x / c): x's id and the factor.
bool scales(const Graph& g, const Node& n, int& x, double& factor) {
  if (n.inputs.size() != 2 || !(is(n, "mul") || is(n, "div"))) return false;
  for (int side = 0; side < 2; ++side) {
    const double c = constant_scalar(g, n.inputs[1 - side]);
    if (std::isnan(c) || (is(n, "div") && side == 1)) continue;
    x = n.inputs[side];
    factor = is(n, "div") ? 1.0 / c : c;
    return true;
  }
  return false;
}

// K for scores computed as matmul(Q, Kt), Kt a permute read only by that
// matmul: the permute itself, changed to leave the last two axes in K's
// order (a plain transpose then gives K's value as it came). -1 when Kt is
// no such permute.
int keys_of(Graph& g, const std::vector<int>& uses, const std::vector<bool>& mutated, int kt) {
  Node* p = sole_producer(g, uses, mutated, kt);
  if (!p || !is(*p, "permute")) return -1;
  auto order = p->attrs.get_ints("order", {});
  const size_t r = order.size();
  if (r < 2) return -1;
  std::swap(order[r - 1], order[r - 2]);
  p->attrs.set("order", order);
  Shape& shape = g.values[kt].meta.shape;
  std::swap(shape[r - 1], shape[r - 2]);
  return kt;
}

// A masked_fill before the softmax: where(blocked, fill, scores) or
// where(kept, scores, fill), with a constant condition and a fill of -inf
// (or a value so low that its exponent is 0 in float32, as -1e9 is). Gives
// the scores' id and which scores are blocked; false for any other where.
bool masked_fill(const Graph& g, const Node& n, int& scores, Tensor& blocked) {
  if (!is(n, "where") || n.inputs.size() != 3) return false;
  const Value& cond = g.values[n.inputs[0]];
  if (cond.kind != ValueKind::Constant || cond.tensor.dtype() != DType::Bool) return false;
  for (int side = 1; side <= 2; ++side) {
    const double fill = constant_scalar(g, n.inputs[side]);
    if (std::isnan(fill) || fill > -1e9) continue;
    scores = n.inputs[3 - side];
    blocked = cond.tensor.to(cpu_device()).contiguous();  // read here, on the host, whatever the graph's device
    if (side == 2) {  // the condition names the kept scores
      Tensor flipped = Tensor::empty(blocked.shape(), DType::Bool);
      const bool* from = blocked.data<bool>();
      bool* to = flipped.data<bool>();
      for (int64_t i = 0; i < blocked.numel(); ++i) to[i] = !from[i];
      blocked = flipped;
    }
    return true;
  }
  return false;
}

// Whether `blocked` ([.., L, S], every leading axis 1) blocks exactly the keys
// after each query (j > i): the attention kernel's causal flag.
bool blocks_later_keys(const Tensor& blocked, int64_t l, int64_t s) {
  const int64_t r = blocked.dim();
  if (r < 2 || blocked.size(-2) != l || blocked.size(-1) != s || blocked.numel() != l * s) return false;
  const bool* p = blocked.data<bool>();
  for (int64_t i = 0; i < l; ++i)
    for (int64_t j = 0; j < s; ++j)
      if (p[i * s + j] != (j > i)) return false;
  return true;
}

// Whether some query sees no key: the separate ops give NaN there, the
// attention op zeros, so such masks stay separate.
bool blocks_a_whole_row(const Tensor& blocked) {
  const int64_t s = blocked.dim() > 0 ? blocked.size(-1) : 1;
  const bool* p = blocked.data<bool>();
  for (int64_t row = 0; row * s < blocked.numel(); ++row)
    if (std::all_of(p + row * s, p + (row + 1) * s, [](bool b) { return b; })) return true;
  return false;
}

// The constant added to x by n (x + c or c + x): c's id, x in `x`; -1 when n adds no constant.
int constant_addend(const Graph& g, const Node& n, int& x) {
  if (!is(n, "add") || n.inputs.size() != 2) return -1;
  for (int side = 0; side < 2; ++side)
    if (is_constant(g, n.inputs[1 - side])) {
      x = n.inputs[side];
      return n.inputs[1 - side];
    }
  return -1;
}

// Swin's shifted windows: the scores plus a constant bias (relative
// positions), viewed with the windows apart from the batch, plus a constant
// mask (the shift's), viewed back: one constant mask of the scores' shape,
// made here. `back` is the view back; on success `scores` is the scores'
// id, the four ops join `chain`, and the mask's id is returned; else -1.
int two_constant_masks(Graph& g, const std::vector<int>& uses, const std::vector<bool>& mutated, Node& back,
                       int& scores, std::vector<Node*>& chain) {
  if (!is(back, "view")) return -1;
  Node* outer = sole_producer(g, uses, mutated, back.inputs[0]);
  int viewed = -1, x = -1;
  const int shift = outer ? constant_addend(g, *outer, viewed) : -1;
  Node* split = shift >= 0 ? sole_producer(g, uses, mutated, viewed) : nullptr;
  Node* inner = split && is(*split, "view") ? sole_producer(g, uses, mutated, split->inputs[0]) : nullptr;
  const int bias = inner ? constant_addend(g, *inner, x) : -1;
  if (bias < 0 || !sole_producer(g, uses, mutated, x)) return -1;
  const Shape &s = g.values[inner->outputs[0]].meta.shape, &v = g.values[viewed].meta.shape;
  if (g.values[back.outputs[0]].meta.shape != s || g.values[x].meta.shape != s ||
      g.values[bias].meta.dtype != DType::Float32 || g.values[shift].meta.dtype != DType::Float32)
    return -1;
  NoGradGuard no_grad;
  const Tensor sum = g.values[bias].tensor.expand(s) + g.values[shift].tensor.expand(v).contiguous().reshape(s);
  scores = x;
  chain.insert(chain.end(), {&back, outer, split, inner});
  return add_constant(g, sum.contiguous(), "window_mask");
}

}  // namespace

std::string fuse_attention(Graph& g) {
  const auto uses = g.use_counts();
  const auto mutated = g.mutated_values();
  const OpDef& attention = OpRegistry::instance().get("attention");
  size_t fused = 0;
  for (Node& out : g.nodes) {
    if (!is(out, "matmul")) continue;
    Node* softmax = sole_producer(g, uses, mutated, out.inputs[0]);
    if (!softmax || !is(*softmax, "softmax")) continue;
    const int64_t rank = static_cast<int64_t>(g.values[softmax->outputs[0]].meta.shape.size());
    const int64_t axis = softmax->attrs.get_int("axis", -1);
    if (rank < 3 || (axis != -1 && axis != rank - 1)) continue;
    // Back from the softmax: an additive mask, a scale, the scores' matmul.
    std::vector<Node*> chain = {softmax};
    int scores = softmax->inputs[0], mask = -1;
    double scale = 1;
    bool causal = false;
    Node* n = sole_producer(g, uses, mutated, scores);
    Tensor blocked;
    if (n && (mask = two_constant_masks(g, uses, mutated, *n, scores, chain)) >= 0) {
      n = sole_producer(g, uses, mutated, scores);
    } else if (n && masked_fill(g, *n, scores, blocked)) {
      const Shape& shape = g.values[scores].meta.shape;
      if (shape.size() < 2 || blocks_a_whole_row(blocked)) continue;
      causal = blocks_later_keys(blocked, shape[shape.size() - 2], shape.back());
      if (causal) blocked = Tensor();  // else it becomes an additive mask once the pattern is whole
      chain.push_back(n);
      n = sole_producer(g, uses, mutated, scores);
    } else if (n && is(*n, "add") && n->inputs.size() == 2) {
      for (int side = 0; side < 2 && mask < 0; ++side) {
        Node* below = sole_producer(g, uses, mutated, n->inputs[side]);
        if (below && (is(*below, "matmul") || is(*below, "mul") || is(*below, "div"))) {
          mask = n->inputs[1 - side];
          scores = n->inputs[side];
        }
      }
      if (mask < 0) continue;
      chain.push_back(n);
      n = sole_producer(g, uses, mutated, scores);
    }
    int unscaled;
    double factor;
    if (n && scales(g, *n, unscaled, factor)) {
      chain.push_back(n);
      scale *= factor;
      n = sole_producer(g, uses, mutated, unscaled);
    }
    if (!n || !is(*n, "matmul")) continue;
    Node* product = n;
    chain.push_back(product);
    int q = product->inputs[0];
    if (Node* pre = sole_producer(g, uses, mutated, q); pre && scales(g, *pre, unscaled, factor)) {
      chain.push_back(pre);
      scale *= factor;
      q = unscaled;
    }
    // A mask that broadcasts the scores to a larger shape stays a separate add.
    if (g.values[softmax->inputs[0]].meta.shape != g.values[product->outputs[0]].meta.shape) continue;
    const int kt = product->inputs[1], v = out.inputs[1];
    const TensorMeta &qm = g.values[q].meta, &ktm = g.values[kt].meta, &vm = g.values[v].meta;
    if (qm.dtype != DType::Float32 || ktm.dtype != qm.dtype || vm.dtype != qm.dtype || scale <= 0) continue;
    if (qm.shape.size() != static_cast<size_t>(rank) || ktm.shape.size() != qm.shape.size() ||
        vm.shape.size() != qm.shape.size() || !std::equal(qm.shape.begin(), qm.shape.end() - 2, ktm.shape.begin()) ||
        !std::equal(qm.shape.begin(), qm.shape.end() - 2, vm.shape.begin()))
      continue;  // broadcast batch axes: left to the separate ops
    if (mask >= 0 && g.values[mask].meta.dtype != qm.dtype) continue;
    const int k = keys_of(g, uses, mutated, kt);
    if (k < 0) continue;
    if (blocked.defined()) {  // the masked_fill as an additive mask: -inf where blocked
      Tensor additive = Tensor::empty(blocked.shape(), DType::Float32);
      const bool* from = blocked.data<bool>();
      float* to = additive.data<float>();
      for (int64_t i = 0; i < blocked.numel(); ++i) to[i] = from[i] ? -std::numeric_limits<float>::infinity() : 0.0f;
      mask = add_constant(g, additive.to(qm.device));
    }
    Node fused_node;
    fused_node.op = &attention;
    fused_node.inputs = {q, k, v};
    if (mask >= 0) fused_node.inputs.push_back(mask);
    fused_node.attrs = Attrs{{"scale", scale}, {"causal", causal}, {"save_weights", false}};
    Value weights;
    weights.meta = {true, {0}, qm.dtype, qm.device};
    fused_node.outputs = {out.outputs[0], g.add_value(std::move(weights))};
    const int at = static_cast<int>(&out - g.nodes.data());
    g.values[fused_node.outputs[1]].producer = at;
    g.values[fused_node.outputs[1]].output_index = 1;
    for (Node* gone : chain) gone->removed = true;
    out = std::move(fused_node);
    ++fused;
  }
  return fused ? "fused " + std::to_string(fused) + " attention patterns (matmul, scale, mask, softmax, matmul) into attention ops" : "";
}

}  // namespace kiln::graph

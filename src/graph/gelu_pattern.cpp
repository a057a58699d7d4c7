// Inference: GELU written out in elementary ops becomes one gelu: the erf
// form, x * 0.5 * (1 + erf(x / √2)), and the tanh form, x * 0.5 *
// (1 + tanh(√(2/π) (x + 0.044715 x³))), in any of their usual orders. ONNX
// has no Gelu before opset 20, so PyTorch exports F.gelu so (ConvNeXt, ViT,
// Swin, BERT; GPT-2's the tanh one), and five to nine ops, even fused into
// one loop, are a pass over the activations that a linear layer's epilogue
// can do instead once they are one op.
#include <cmath>

#include "graph/passes.h"
#include "kiln/registry.h"

namespace kiln::graph {
namespace {

bool near(double v, double want) { return std::abs(v - want) <= 1e-6 * want; }

class GeluMatcher {
 public:
  explicit GeluMatcher(Graph& g) : g_(g), uses_(g.use_counts()), mutated_(g.mutated_values()) {}

  // The node whose output is gelu(x), when `at` is the erf or tanh of such
  // a pattern; the nodes it replaces are listed in `inner`.
  int match(int at) {
    inner_.clear();
    const Node& e = g_.nodes[at];
    tanh_ = e.is_op("tanh");
    const int scaled = e.inputs[0];
    const int x = tanh_ ? tanh_argument(scaled) : scaled_input(scaled);
    if (x < 0 || !inner(scaled) || !inner(e.outputs[0])) return -1;
    // 1 + erf(...)
    const int add = only_reader(e.outputs[0]);
    if (add < 0 || !g_.nodes[add].is_op("add") || other_input(add, e.outputs[0]) < 0 ||
        constant_scalar(g_, other_input(add, e.outputs[0])) != 1.0 || !inner(g_.nodes[add].outputs[0]))
      return -1;
    const int sum = g_.nodes[add].outputs[0];
    // Times x and 0.5, in one of three orders: (x * sum) * 0.5,
    // (sum * 0.5) * x, or (x * 0.5) * sum.
    const int first = only_reader(sum);
    if (first < 0 || !g_.nodes[first].is_op("mul")) return -1;
    const int other = other_input(first, sum);
    if (other == x || constant_scalar(g_, other) == 0.5) {
      const int partial = g_.nodes[first].outputs[0];
      const int second = only_reader(partial);
      if (second < 0 || !g_.nodes[second].is_op("mul") || !inner(partial)) return -1;
      const int last = other_input(second, partial);
      const bool factors = other == x ? constant_scalar(g_, last) == 0.5 : last == x;
      return factors ? finish(second, x) : -1;
    }
    const int half_at = other >= 0 ? g_.values[other].producer : -1;
    if (half_at < 0 || !g_.nodes[half_at].is_op("mul") || !inner(other)) return -1;
    const Node& half = g_.nodes[half_at];
    const bool halves_x = (half.inputs[0] == x && constant_scalar(g_, half.inputs[1]) == 0.5) ||
                          (half.inputs[1] == x && constant_scalar(g_, half.inputs[0]) == 0.5);
    return halves_x ? finish(first, x) : -1;
  }

  const std::vector<int>& inner_nodes() const { return inner_; }
  int input() const { return x_; }
  bool tanh_form() const { return tanh_; }

 private:
  // The node producing id when it is op, else null.
  const Node* producer(int id, const char* op) const {
    const int at = id >= 0 ? g_.values[id].producer : -1;
    return at >= 0 && g_.nodes[at].is_op(op) ? &g_.nodes[at] : nullptr;
  }

  // Of a binary node, the input other than a one-value constant near `c`
  // (either side), or -1.
  int times_constant(const Node* n, double c) const {
    if (!n || n->inputs.size() != 2) return -1;
    if (near(constant_scalar(g_, n->inputs[1]), c)) return n->inputs[0];
    if (near(constant_scalar(g_, n->inputs[0]), c)) return n->inputs[1];
    return -1;
  }

  // Whether id is x³: pow(x, 3), x * (x * x) or (x * x) * x.
  bool cube_of(int id, int x) {
    if (const Node* p = producer(id, "pow")) {
      if (p->inputs.size() == 2 && p->inputs[0] == x && constant_scalar(g_, p->inputs[1]) == 3.0) return inner(id);
      return false;
    }
    const Node* m = producer(id, "mul");
    if (!m || m->inputs.size() != 2) return false;
    const int square = m->inputs[0] == x ? m->inputs[1] : m->inputs[1] == x ? m->inputs[0] : -1;
    const Node* sq = producer(square, "mul");
    return sq && sq->inputs[0] == x && sq->inputs[1] == x && inner(square) && inner(id);
  }

  // x, when `arg` is √(2/π) (x + 0.044715 x³).
  int tanh_argument(int arg) {
    const int sum = times_constant(producer(arg, "mul"), std::sqrt(2.0 / M_PI));
    const Node* add = producer(sum, "add");
    if (!add || add->inputs.size() != 2 || !inner(sum)) return -1;
    const size_t taken = inner_.size();
    for (int side = 0; side < 2; ++side) {
      const int x = add->inputs[side], term = add->inputs[1 - side];
      const int cube = times_constant(producer(term, "mul"), 0.044715);
      if (cube >= 0 && inner(term) && cube_of(cube, x)) return x;
      inner_.resize(taken);  // (that side was not it)
    }
    return -1;
  }

  // x, when `scaled` is x / √2 or x * (1/√2).
  int scaled_input(int scaled) const {
    const int at = g_.values[scaled].producer;
    if (at < 0) return -1;
    const Node& n = g_.nodes[at];
    if (n.is_op("div") && near(constant_scalar(g_, n.inputs[1]), std::sqrt(2.0))) return n.inputs[0];
    if (!n.is_op("mul")) return -1;
    if (near(constant_scalar(g_, n.inputs[1]), std::sqrt(0.5))) return n.inputs[0];
    if (near(constant_scalar(g_, n.inputs[0]), std::sqrt(0.5))) return n.inputs[1];
    return -1;
  }

  // A value inside the pattern: read once (by the pattern's next op), never
  // written in place; its producer is then replaced.
  bool inner(int id) {
    if (uses_[id] != 1 || mutated_[id] || g_.values[id].producer < 0) return false;
    inner_.push_back(g_.values[id].producer);
    return true;
  }

  int only_reader(int id) const { return g_.sole_reader(id, uses_); }

  // The binary node's input beside `id`, or -1.
  int other_input(int node, int id) const {
    const Node& n = g_.nodes[node];
    if (n.inputs.size() != 2) return -1;
    return n.inputs[0] == id ? n.inputs[1] : n.inputs[1] == id ? n.inputs[0] : -1;
  }

  int finish(int last, int x) {
    const Value &in = g_.values[x], &out = g_.values[g_.nodes[last].outputs[0]];
    if (in.meta.shape != out.meta.shape || in.meta.dtype != out.meta.dtype) return -1;
    x_ = x;
    return last;
  }

  Graph& g_;
  const std::vector<int> uses_;
  const std::vector<bool> mutated_;
  std::vector<int> inner_;
  int x_ = -1;
  bool tanh_ = false;
};

}  // namespace

std::string recognize_gelu(Graph& g) {
  const OpDef& gelu = OpRegistry::instance().get("gelu");
  size_t found = 0;
  // (Use counts computed once: a rewrite changes only those of its own
  // values, which no later pattern reads, and of x, whose count no pattern checks.)
  GeluMatcher m(g);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!g.nodes[i].is_op("erf") && !g.nodes[i].is_op("tanh")) continue;
    const int last = m.match(static_cast<int>(i));
    if (last < 0) continue;
    for (int n : m.inner_nodes()) g.nodes[n].removed = true;
    Node& n = g.nodes[last];
    n.op = &gelu;
    n.inputs = {m.input()};
    n.attrs = Attrs{};
    n.attrs.set("approximate", std::string(m.tanh_form() ? "tanh" : "none"));
    ++found;
  }
  return found ? std::to_string(found) + " GELUs written out in erf or tanh, add and mul ops into gelu" : "";
}

}  // namespace kiln::graph

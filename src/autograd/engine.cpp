// The backward engine: walks the recorded Nodes in dependency order, calls
// each op's gradient rule (written with Kiln ops) and accumulates results.
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd.h"
#include "kiln/functional.h"

namespace kiln::autograd {
namespace {

void check_saved(const Node& node) {
  if (node.released) {
    KILN_FAIL("backward through the graph a second time: the tensors saved by '", node.op->name,
              "' were freed by the first backward; pass retain_graph=true to the first backward() "
              "if you need to run it again");
  }
  auto check = [&](const std::vector<SavedTensor>& saved, const char* kind) {
    for (size_t i = 0; i < saved.size(); ++i) {
      const Tensor& t = saved[i].tensor;
      if (!t.defined()) continue;
      uint32_t now = t.impl().storage->version.load();
      KILN_CHECK(now == saved[i].version, "a tensor that '", node.op->name, "' saved for backward (", kind, " ", i,
                 ", ", t.meta_str(), ") was modified in place after the op ran (version ", saved[i].version,
                 " -> ", now, "); clone() it before changing it, or change it before using it");
    }
  };
  check(node.inputs, "input");
  check(node.outputs, "output");
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return add(a, b);
}

struct Capture {
  std::map<std::pair<Node*, int>, size_t> nonleaf;  // (node, output_nr) -> result index
  std::unordered_map<TensorImpl*, size_t> leaf;
  std::vector<Tensor> results;
};

thread_local LeafGradientListener* listener = nullptr;

void run(const std::vector<std::pair<Edge, Tensor>>& roots, bool retain_graph, Capture* capture) {
  NoGradGuard no_grad;
  AutocastScope no_autocast(std::nullopt);  // gradients in the dtypes the forward chose
  // Count the edges into each node reachable from the roots, and into each
  // leaf, whose gradient is complete when the last one has delivered.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<TensorImpl*, int> leaf_deps;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep;
  std::vector<Node*> stack;
  LeafGradientListener* const listen = listener;
  for (auto& [e, g] : roots) {
    if (e.leaf) ++leaf_deps[e.leaf.get()];
    if (e.node && !keep.count(e.node.get())) {
      keep[e.node.get()] = e.node;
      stack.push_back(e.node.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next) {
      if (e.leaf) ++leaf_deps[e.leaf.get()];
      if (!e.node) continue;
      deps[e.node.get()]++;
      if (!keep.count(e.node.get())) {
        keep[e.node.get()] = e.node;
        stack.push_back(e.node.get());
      }
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto add_to_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    if (capture) {
      auto it = capture->leaf.find(leaf.get());
      if (it != capture->leaf.end()) capture->results[it->second] = accumulate(capture->results[it->second], g);
      return;
    }
    if (!leaf->grad) {
      // The rule may hand the same tensor to several inputs; a leaf's grad
      // must be its own, since optimizers and clipping change it in place.
      if (g.impl_ptr().use_count() > 1 || g.impl().storage.use_count() > 1 || !g.is_contiguous()) g = g.clone();
      leaf->grad = g.impl_ptr();
    } else {
      leaf->grad = add(Tensor(leaf->grad), g).impl_ptr();
    }
  };
  // Every edge into a leaf arrives here, with a gradient or without.
  auto deliver_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, const Tensor& g) {
    if (g.defined()) add_to_leaf(leaf, g);
    if (!listen || --leaf_deps[leaf.get()] > 0) return;
    if (!capture) {
      (*listen)(leaf.get(), leaf->grad ? Tensor(leaf->grad) : Tensor());
    } else if (auto it = capture->leaf.find(leaf.get()); it != capture->leaf.end()) {
      (*listen)(leaf.get(), capture->results[it->second]);
    }
  };

  std::vector<Node*> ready;
  for (auto& [e, g] : roots) {
    if (e.node) {
      auto& buf = buffers[e.node.get()];
      buf.resize(e.node->output_metas.size());
      buf[e.output_nr] = accumulate(buf[e.output_nr], g);
    } else if (e.leaf) {
      deliver_leaf(e.leaf, g);
    }
  }
  for (auto& [n, _] : keep)
    if (deps[n] == 0) ready.push_back(n);

  while (!ready.empty()) {
    // Newest first keeps the walk deterministic.
    auto it = std::max_element(ready.begin(), ready.end(), [](Node* a, Node* b) { return a->sequence < b->sequence; });
    Node* node = *it;
    ready.erase(it);
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->output_metas.size());
    if (capture) {
      for (size_t k = 0; k < grads.size(); ++k) {
        auto c = capture->nonleaf.find({node, static_cast<int>(k)});
        if (c != capture->nonleaf.end()) capture->results[c->second] = grads[k];
      }
    }
    bool any = false;
    for (auto& g : grads) any = any || g.defined();
    std::vector<Tensor> input_grads;
    if (any) {
      check_saved(*node);
      if (!grads[0].defined())
        grads[0] = zeros(node->output_metas[0].shape, node->output_metas[0].dtype, node->output_metas[0].device);
      std::vector<Tensor> ins(node->inputs.size()), outs(node->outputs.size());
      std::vector<bool> needs(node->next.size());
      for (size_t i = 0; i < ins.size(); ++i) ins[i] = node->inputs[i].tensor;
      for (size_t i = 0; i < outs.size(); ++i) outs[i] = node->outputs[i].tensor;
      for (size_t i = 0; i < needs.size(); ++i) needs[i] = node->next[i].node || node->next[i].leaf;
      GradContext ctx{ins, outs, node->attrs, needs};
      try {
        input_grads = node->op->grad(ctx, grads);
      } catch (const Error& e) {
        KILN_FAIL("in the backward of '", node->op->name, "': ", e.what());
      }
      KILN_ASSERT(input_grads.size() <= node->next.size(), "gradient rule of '", node->op->name,
                  "' returned too many gradients");
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const Edge& e = node->next[i];
      Tensor g = i < input_grads.size() ? input_grads[i] : Tensor();
      if (g.defined()) {
        const Tensor& in = node->inputs[i].tensor;
        KILN_ASSERT(g.shape() == in.shape(), "gradient rule of '", node->op->name, "' gave input ", i, " a gradient of shape ",
                    shape_str(g.shape()), " for an input of shape ", shape_str(in.shape()));
        if (g.dtype() != in.dtype()) g = g.to(in.dtype());
      }
      if (e.node) {
        if (g.defined()) {
          auto& buf = buffers[e.node.get()];
          buf.resize(e.node->output_metas.size());
          buf[e.output_nr] = accumulate(buf[e.output_nr], g);
        }
        if (--deps[e.node.get()] == 0) ready.push_back(e.node.get());
      } else if (e.leaf) {
        deliver_leaf(e.leaf, g);
      }
    }
    if (!retain_graph) {
      node->inputs.clear();
      node->outputs.clear();
      node->released = true;
    }
  }
}

Edge edge_of(const Tensor& t) {
  Edge e;
  if (t.impl().grad_fn) {
    e.node = t.impl().grad_fn;
    e.output_nr = t.impl().output_nr;
  } else {
    e.leaf = t.impl_ptr();
  }
  return e;
}

Tensor root_gradient(const Tensor& root, const Tensor& gradient) {
  KILN_CHECK(root.requires_grad(), "backward() on a tensor that does not require grad (", root.meta_str(),
             "): no input of the computation had requires_grad set, or it ran under NoGradGuard");
  if (gradient.defined()) {
    KILN_CHECK(gradient.shape() == root.shape(), "backward(): gradient has shape ", shape_str(gradient.shape()),
               " but the tensor has shape ", shape_str(root.shape()), "; pass a gradient of the same shape");
    return gradient.to(root.dtype()).to(root.device());
  }
  KILN_CHECK(root.numel() == 1, "backward() without a gradient needs a one-element tensor, but this one is ",
             root.meta_str(), "; pass a gradient of the same shape (e.g. ones_like(y)) or reduce it first (sum/mean)");
  return ones(root.shape(), root.dtype(), root.device());
}

}  // namespace

LeafGradientListener::LeafGradientListener(Fn fn) : fn_(std::move(fn)), outer_(listener) { listener = this; }
LeafGradientListener::~LeafGradientListener() { listener = outer_; }
LeafGradientListener* LeafGradientListener::current() { return listener; }

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  Tensor g = root_gradient(root, gradient);
  run({{edge_of(root), g}}, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "grad(): ", outputs.size(),
             " outputs but ", grad_outputs.size(), " grad_outputs; pass one per output or none");
  std::vector<std::pair<Edge, Tensor>> roots;
  for (size_t i = 0; i < outputs.size(); ++i)
    roots.push_back({edge_of(outputs[i]), root_gradient(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i])});
  Capture capture;
  capture.results.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(inputs[i].requires_grad(), "grad(): input ", i, " (", inputs[i].meta_str(), ") does not require grad");
    if (inputs[i].impl().grad_fn)
      capture.nonleaf[{inputs[i].impl().grad_fn.get(), inputs[i].impl().output_nr}] = i;
    else
      capture.leaf[inputs[i].impl_ptr().get()] = i;
  }
  run(roots, retain_graph, &capture);
  return capture.results;
}

}  // namespace kiln::autograd

namespace kiln {
void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward(*this, gradient, retain_graph);
}
}  // namespace kiln

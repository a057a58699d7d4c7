#pragma once
// Eager autograd: a tape of Nodes built as ops run, walked by backward().
#include <functional>
#include <memory>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/grad_mode.h"
#include "kiln/registry.h"
#include "kiln/tensor.h"

namespace kiln {
struct OpDef;

namespace autograd {

// Where a gradient flows next: another node's output, or a leaf's .grad.
struct Edge {
  std::shared_ptr<Node> node;
  int output_nr = 0;
  std::shared_ptr<TensorImpl> leaf;  // set for leaves that require grad
};

struct SavedTensor {
  Tensor tensor;
  uint32_t version = 0;
};

struct Node {
  const OpDef* op = nullptr;
  Attrs attrs;
  std::vector<SavedTensor> inputs;   // undefined where not saved
  std::vector<SavedTensor> outputs;  // detached aliases (no cycle back to the node)
  std::vector<TensorMeta> output_metas;
  std::vector<Edge> next;            // one per input; empty node and leaf = no grad
  bool released = false;             // saved tensors freed by a backward pass
  uint64_t sequence = 0;             // creation order, for a stable topological walk
};

// Gradients of `outputs` with respect to `inputs` (without touching .grad).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

// Hears, during the backward passes this thread runs while it is installed,
// of each leaf whose gradient is complete: backward() passes the leaf's
// .grad, grad() the result it will return. Data parallelism starts the
// all-reduce of a bucket as soon as its gradients are ready, while the
// rest of backward still runs. Installed for its own lifetime.
class LeafGradientListener {
 public:
  using Fn = std::function<void(TensorImpl* leaf, const Tensor& gradient)>;
  explicit LeafGradientListener(Fn fn);
  ~LeafGradientListener();
  LeafGradientListener(const LeafGradientListener&) = delete;
  LeafGradientListener& operator=(const LeafGradientListener&) = delete;
  static LeafGradientListener* current();
  void operator()(TensorImpl* leaf, const Tensor& gradient) const { fn_(leaf, gradient); }

 private:
  Fn fn_;
  LeafGradientListener* outer_;
};

}  // namespace autograd

}  // namespace kiln

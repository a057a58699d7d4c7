#pragma once
// Eager autograd: a tape of Nodes built as ops run, walked by backward().
#include <memory>
#include <vector>

#include "kiln/attrs.h"
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

bool grad_enabled();
void set_grad_enabled(bool on);

// Gradients of `outputs` with respect to `inputs` (without touching .grad).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false);

void backward(const Tensor& root, const Tensor& gradient, bool retain_graph);

}  // namespace autograd

// Disables gradient recording for its lifetime.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln

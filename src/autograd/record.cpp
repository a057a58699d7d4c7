// Recording the tape: after each op with a gradient rule runs in grad mode,
// the dispatcher hands it here, and a Node is recorded when an input needs a
// gradient. Installed into the dispatcher when the library loads.
#include <algorithm>
#include <atomic>

#include "kiln/autograd.h"
#include "ops/dispatch_hooks.h"

namespace kiln::autograd {
namespace {

std::atomic<uint64_t> g_sequence{0};

void record_node(const OpDef& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, const Attrs& attrs,
                 const std::vector<bool>& needs) {
  auto node = std::make_shared<Node>();
  node->op = &op;
  node->attrs = attrs;
  node->sequence = g_sequence.fetch_add(1);
  node->inputs.resize(inputs.size());
  node->next.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    node->inputs[i] = {inputs[i], inputs[i].impl().storage->version.load()};
    if (!needs[i]) continue;
    auto& impl = inputs[i].impl();
    if (impl.grad_fn) {
      node->next[i].node = impl.grad_fn;
      node->next[i].output_nr = impl.output_nr;
    } else {
      node->next[i].leaf = inputs[i].impl_ptr();
    }
  }
  node->outputs.resize(outputs.size());
  node->output_metas.resize(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor& out = outputs[i];
    node->outputs[i] = {out.detach(), out.impl().storage->version.load()};
    node->output_metas[i] = {true, out.shape(), out.dtype(), out.device()};
    if (!is_floating(out.dtype())) continue;
    // A view op may hand back its input's impl unchanged; never rewrite that.
    if (out.impl().grad_fn) continue;
    out.impl().requires_grad = true;
    out.impl().grad_fn = node;
    out.impl().output_nr = static_cast<int>(i);
  }
}

void record(const OpDef& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs, const Attrs& attrs) {
  std::vector<bool> needs(inputs.size(), false);
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad() || !is_floating(inputs[i].dtype())) continue;
    if (!op.differentiable_inputs.empty() &&
        std::find(op.differentiable_inputs.begin(), op.differentiable_inputs.end(), static_cast<int>(i)) ==
            op.differentiable_inputs.end())
      continue;
    needs[i] = any = true;
  }
  if (!any) return;
  if (op.has_tag(kTagView)) {
    // Give each view its own impl so that autograd metadata is per view.
    for (auto& out : outputs)
      if (out.same(inputs[0])) out = out.detach();
  }
  record_node(op, inputs, outputs, attrs, needs);
}

[[maybe_unused]] const bool g_installed = (detail::set_grad_recorder(&record), true);

}  // namespace
}  // namespace kiln::autograd

// Running an op: shape inference, kernel choice, output allocation, and
// recording the autograd node. Errors get the op's context attached here.
#include <algorithm>
#include <atomic>

#include "graph/trace_hook.h"
#include "kiln/autograd.h"
#include "kiln/parallel.h"
#include "kiln/profiler.h"
#include "kiln/registry.h"
#include "ops/dispatch_internal.h"

namespace kiln {
namespace {

std::string describe_inputs(const OpDef& op, const std::vector<TensorMeta>& metas) {
  std::string s;
  for (size_t i = 0; i < metas.size(); ++i) {
    if (i) s += ", ";
    std::string name = i < op.inputs.size() ? op.inputs[i] : op.inputs.empty() ? "x" : op.inputs.back();
    while (!name.empty() && (name.back() == '?' || name.back() == '*')) name.pop_back();
    s += name + "=";
    s += metas[i].defined ? std::string(dtype_name(metas[i].dtype)) + shape_str(metas[i].shape) : "none";
  }
  return s;
}

[[noreturn]] void rethrow_with_context(const OpDef& op, const std::vector<TensorMeta>& metas,
                                       const Attrs& attrs, const std::exception& e) {
  std::string msg = std::string(op.name) + ": " + e.what() + "\n  inputs: " + describe_inputs(op, metas);
  if (!attrs.items().empty()) msg += "\n  attributes: " + attrs.str();
  Device dev = metas.empty() ? Device{} : metas[0].device;
  msg += "\n  backend: " + dev.str();
  throw Error(msg);
}

bool is_context_attached(const std::exception& e) {
  return std::string(e.what()).find("\n  inputs: ") != std::string::npos;
}

std::atomic<uint64_t> g_sequence{0};
std::atomic<DispatchObserver> g_observer{nullptr};

Tensor detached_alias(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl().storage;
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  return Tensor(impl);
}

void record(const OpDef& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
            const Attrs& attrs, const std::vector<bool>& needs) {
  auto node = std::make_shared<autograd::Node>();
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
    node->outputs[i] = {detached_alias(out), out.impl().storage->version.load()};
    node->output_metas[i] = {true, out.shape(), out.dtype(), out.device()};
    if (!is_floating(out.dtype())) continue;
    // A view op may hand back its input's impl unchanged; never rewrite that.
    if (out.impl().grad_fn) continue;
    out.impl().requires_grad = true;
    out.impl().grad_fn = node;
    out.impl().output_nr = static_cast<int>(i);
  }
}


}  // namespace

const char* op_category(const OpDef& op) {
  const std::string& n = op.name;
  if (op.has_tag(kTagView)) return "view";
  if (op.has_tag(kTagLoss)) return "loss";
  if (n.find("conv") != std::string::npos) return "convolution";
  if (n.find("matmul") != std::string::npos || n.find("linear") != std::string::npos) return "matmul";
  if (n.find("pool") != std::string::npos) return "pooling";
  if (n.find("norm") != std::string::npos) return "normalization";
  if (op.has_tag(kTagReduction)) return "reduction";
  if (op.has_tag(kTagElementwise)) return "elementwise";
  return "other";
}

void bump_written_versions(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  if (!op.writes_with(attrs)) return;
  for (int i : op.writes)
    if (static_cast<size_t>(i) < inputs.size() && inputs[i].defined()) inputs[i].impl().storage->version++;
}

// Only reached while profiling: the strings are built here, not on the hot path.
void record_profile(const OpDef* op, const std::string& name, Device device, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs, int64_t start_ns) {
  profiler::Record r;
  r.start_ns = start_ns;
  r.duration_ns = profiler::detail::now_ns() - start_ns;
  r.name = name;
  r.type = op ? op_category(*op) : "fused";
  if (op && op->has_tag(kTagBackward)) r.type += " backward";
  r.backend = device_type_name(device.type);
  for (const auto& t : inputs) {
    if (!r.shapes.empty()) r.shapes += ", ";
    r.shapes += t.defined() ? t.meta_str() : "none";
    if (t.defined()) r.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  for (const auto& t : outputs)
    if (t.defined()) r.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  profiler::detail::record_op(std::move(r));
}

void set_dispatch_observer(DispatchObserver observer) { g_observer.store(observer); }

std::vector<Tensor> call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  apply_num_threads_to_this_thread();
  if (DispatchObserver obs = g_observer.load(std::memory_order_relaxed)) obs(op, inputs);
  std::vector<TensorMeta> metas(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined()) {
      metas[i] = {true, inputs[i].shape(), inputs[i].dtype(), inputs[i].device()};
    } else {
      metas[i].defined = false;
    }
  }
  std::vector<TensorMeta> out_metas;
  KernelFn kernel = nullptr;
  try {
    size_t required = 0;
    for (auto& name : op.inputs)
      if (name.back() != '?' && name.back() != '*') ++required;
    KILN_CHECK(inputs.size() >= required && (op.variadic() || inputs.size() <= op.inputs.size()), "expects ",
               op.inputs.size(), " inputs, got ", inputs.size());
    for (size_t i = 0; i < inputs.size() && i < op.inputs.size(); ++i) {
      KILN_CHECK(metas[i].defined || op.inputs[i].back() == '?' || op.inputs[i].back() == '*',
                 "input '", op.inputs[i], "' is required but was not given");
    }
    KILN_CHECK(static_cast<size_t>(op.dispatch_input) < inputs.size() && metas[op.dispatch_input].defined,
               "missing input ", op.dispatch_input);
    out_metas = op.infer(metas, attrs);
    const TensorMeta& d = metas[op.dispatch_input];
    kernel = op.kernels[static_cast<int>(d.device.type)][static_cast<int>(d.dtype)];
    if (kernel == nullptr) {
      std::string supported;
      for (DType t : op.dtypes(d.device.type)) supported += std::string(supported.empty() ? "" : ", ") + dtype_name(t);
      KILN_FAIL("no ", device_type_name(d.device.type), " kernel for dtype ", dtype_name(d.dtype),
                supported.empty() ? std::string("; this backend has no kernel for this op at all")
                                  : "; supported dtypes are " + supported + ": cast the input with .to(dtype)");
    }
  } catch (const std::exception& e) {
    if (is_context_attached(e)) throw;
    rethrow_with_context(op, metas, attrs, e);
  }

  std::vector<Tensor> outputs(out_metas.size());
  const bool view = op.has_tag(kTagView);
  if (!view) {
    for (size_t i = 0; i < out_metas.size(); ++i)
      outputs[i] = Tensor::empty(out_metas[i].shape, out_metas[i].dtype, metas[op.dispatch_input].device);
  }
  const int64_t profile_start = profiler::detail::active() ? profiler::detail::now_ns() : -1;
  try {
    graph::detail::KernelDepth depth;
    kernel(inputs, outputs, attrs);
    bump_written_versions(op, inputs, attrs);
  } catch (const std::exception& e) {
    if (is_context_attached(e)) throw;
    rethrow_with_context(op, metas, attrs, e);
  }
  if (profile_start >= 0) record_profile(&op, op.name, metas[op.dispatch_input].device, inputs, outputs, profile_start);
  if (graph::detail::tracing()) graph::detail::trace_call(op, inputs, outputs, attrs);

  if (op.grad && autograd::grad_enabled()) {
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
    if (any) {
      if (view) {
        // Give each view its own impl so that autograd metadata is per view.
        for (auto& out : outputs)
          if (out.same(inputs[0])) out = detached_alias(out);
      }
      record(op, inputs, outputs, attrs, needs);
    }
  }
  return outputs;
}

std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call(OpRegistry::instance().get(op), inputs, attrs);
}

Tensor call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call(op, inputs, attrs)[0];
}

}  // namespace kiln

// Running an op: shape inference, kernel choice, output allocation, then the
// hooks of the layers above (autograd's recorder, the tracer). Errors get the
// op's context attached here.
#include <atomic>

#include "core/read_observer.h"
#include "kiln/grad_mode.h"
#include "kiln/parallel.h"
#include "kiln/profiler.h"
#include "kiln/registry.h"
#include "ops/dispatch_hooks.h"
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

// "'x'" for a named input (its optional/variadic mark dropped), "3" past the names.
std::string input_name(const OpDef& op, size_t i) {
  if (i >= op.inputs.size()) return std::to_string(i);
  std::string name = op.inputs[i];
  if (!name.empty() && (name.back() == '?' || name.back() == '*')) name.pop_back();
  return "'" + name + "'";
}

// Out of line and cold: the check runs on every op, the message almost never.
[[noreturn, gnu::cold, gnu::noinline]] void fail_on_devices(const OpDef& op, const std::vector<TensorMeta>& metas,
                                                            size_t i) {
  const size_t at = static_cast<size_t>(op.dispatch_input);
  KILN_FAIL("input ", input_name(op, i), " is on ", metas[i].device.str(), " but input ", input_name(op, at), " is on ",
            metas[at].device.str(), "; an op's inputs must share one device: copy one of them to the other's device first");
}

std::atomic<DispatchObserver> g_observer{nullptr};
std::atomic<detail::GradRecorder> g_grad_recorder{nullptr};

}  // namespace

const char* op_category(const OpDef& op) {
  if (!op.category.empty()) return op.category.c_str();
  if (op.has_tag(kTagView)) return "view";
  if (op.has_tag(kTagLoss)) return "loss";
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

namespace detail {
thread_local OpObserver t_op_observer = nullptr;
void set_grad_recorder(GradRecorder recorder) { g_grad_recorder.store(recorder); }
}  // namespace detail

namespace {

bool value_fits(const AttrValue& v, const std::string& kind) {
  if (kind.empty()) return true;
  if (kind == "int" || kind == "bool") return std::holds_alternative<int64_t>(v) || std::holds_alternative<bool>(v);
  if (kind == "float") return std::holds_alternative<double>(v) || std::holds_alternative<int64_t>(v);
  if (kind == "ints") return std::holds_alternative<std::vector<int64_t>>(v) || std::holds_alternative<int64_t>(v);
  if (kind == "floats") return std::holds_alternative<std::vector<double>>(v);
  if (kind == "string") return std::holds_alternative<std::string>(v);
  return std::holds_alternative<DType>(v);  // dtype
}

const char* kind_of(const AttrValue& v) {
  static const char* kNames[] = {"int", "float", "bool", "string", "ints", "floats", "dtype"};
  return kNames[v.index()];
}

[[noreturn]] void fail_on_attr(const OpDef& op, const std::string& name, const AttrValue& v) {
  std::string known, close;
  for (const auto& s : op.attr_specs) {
    known += (known.empty() ? "" : ", ") + s.name;
    if (close.empty() && detail::edit_distance(name, s.name) <= 2) close = s.name;
  }
  for (const auto& s : op.attr_specs)
    if (s.name == name)
      KILN_FAIL("attribute '", name, "' must be ", s.kind, ", got ", kind_of(v));
  KILN_FAIL("no attribute '", name, "'", close.empty() ? "" : " (did you mean '" + close + "'?)", "; ",
            known.empty() ? std::string("this op takes none") : "its attributes are " + known);
}

// Every attribute of a call is one the op declares, of its kind: a misspelt
// name would otherwise be ignored and its default used.
void check_attrs(const OpDef& op, const Attrs& attrs) {
  for (const auto& [name, value] : attrs.items()) {
    const OpDef::AttrSpec* spec = nullptr;
    for (const auto& s : op.attr_specs)
      if (s.name == name) spec = &s;
    if (!spec || !value_fits(value, spec->kind)) fail_on_attr(op, name, value);
  }
}

}  // namespace

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
    const TensorMeta& d = metas[op.dispatch_input];
    for (size_t i = 0; i < metas.size(); ++i)
      if (metas[i].defined && !(metas[i].device == d.device)) fail_on_devices(op, metas, i);
    check_attrs(op, attrs);
    out_metas = op.infer(metas, attrs);
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
    detail::KernelScope in_kernel;
    kernel(inputs, outputs, attrs);
    bump_written_versions(op, inputs, attrs);
  } catch (const std::exception& e) {
    if (is_context_attached(e)) throw;
    rethrow_with_context(op, metas, attrs, e);
  }
  if (profile_start >= 0) record_profile(&op, op.name, metas[op.dispatch_input].device, inputs, outputs, profile_start);
  if (detail::t_op_observer != nullptr && !detail::in_kernel()) detail::t_op_observer(op, inputs, outputs, attrs);
  if (op.grad && autograd::grad_enabled())
    if (detail::GradRecorder record = g_grad_recorder.load(std::memory_order_relaxed)) record(op, inputs, outputs, attrs);
  return outputs;
}

std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call(OpRegistry::instance().get(op), inputs, attrs);
}

Tensor call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call(op, inputs, attrs)[0];
}

}  // namespace kiln

// Running an op: shape inference, kernel choice, output allocation, then the
// hooks of the layers above (autograd's recorder, the tracer). Errors get the
// op's context attached here.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "core/device_memory.h"
#include "core/read_observer.h"
#include "kiln/backend.h"
#include "kiln/functional.h"
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
    s += op.input_name(i) + "=";
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
  return i >= op.inputs.size() ? std::to_string(i) : "'" + op.input_name(i) + "'";
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
  for (int i : op.written(attrs, inputs.size()))
    if (static_cast<size_t>(i) < inputs.size() && inputs[i].defined()) inputs[i].impl().storage->version++;
}

DeviceTimer::DeviceTimer(Device device, bool profiling) {
  if (!profiling || device.type == DeviceType::CPU) return;
  Backend& b = backend(device.type);
  if (b.host_memory()) return;
  backend_ = &b;
  start_ = b.record(b.current_stream(device.index));
}

std::function<int64_t()> DeviceTimer::stop() const {
  if (backend_ == nullptr) return nullptr;
  const Event end = backend_->record(backend_->current_stream(start_.device.index));
  return [b = backend_, start = start_, end] {
    b->synchronize(end);
    return static_cast<int64_t>(b->elapsed_seconds(start, end) * 1e9);
  };
}

// Only reached while profiling: the strings are built here, not on the hot path.
void record_profile(const OpDef* op, const std::string& name, Device device, const std::vector<Tensor>& inputs,
                    const std::vector<Tensor>& outputs, int64_t start_ns, bool fallback,
                    std::function<int64_t()> device_ns) {
  profiler::Record r;
  r.fallback = fallback;
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
  if (device_ns)
    profiler::detail::record_op(std::move(r), std::move(device_ns));
  else
    profiler::detail::record_op(std::move(r));
}

void set_dispatch_observer(DispatchObserver observer) { g_observer.store(observer); }

namespace detail {
thread_local OpObserver t_op_observer = nullptr;
thread_local DeviceType t_trace_target = DeviceType::CPU;
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
  if (kind == "strings") return std::holds_alternative<std::vector<std::string>>(v);
  return std::holds_alternative<DType>(v);  // dtype
}

const char* kind_of(const AttrValue& v) {
  static const char* kNames[] = {"int", "float", "bool", "string", "ints", "floats", "dtype", "strings"};
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

std::atomic<int> g_strict{-1};  // -1: not read from the environment yet
std::atomic<int64_t> g_fallbacks{0};

// The CPU kernel standing in for a missing one, or null when there is none
// (or strict_device forbids it, which throws); for a half-precision call
// where the CPU widens to float32, that float32 kernel (*widen set).
KernelFn cpu_fallback(const OpDef& op, const TensorMeta& d, const std::string& why, bool* widen) {
  if (d.device.type == DeviceType::CPU) return nullptr;
  KernelFn cpu = op.kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(d.dtype)];
  if (!cpu && (cpu = widening_kernel(op, cpu_device(), {}, d.dtype, {})) != nullptr) *widen = true;
  if (!cpu) return nullptr;
  // A view moves no data: the CPU's view kernel only makes a tensor over the
  // same storage with other sizes, strides and offset, which is the view on
  // any backend, with no copy and nothing to report.
  if (op.has_tag(kTagView)) return cpu;
  allow_fallback(op, d.device, d.dtype, why);
  return cpu;
}

}  // namespace

void allow_fallback(const OpDef& op, Device device, DType dtype, const std::string& why) {
  const std::string missing = why.empty() ? std::string("no ") + device_type_name(device.type) + " kernel for dtype " + dtype_name(dtype)
                                          : std::string("the ") + device_type_name(device.type) + " kernel does not take this call (" + why + ")";
  KILN_CHECK(!strict_device(), missing,
             ", and strict_device forbids running it on the CPU instead; unset KILN_STRICT_DEVICE (or call "
             "set_strict_device(false)) to let it fall back, or move its inputs to the CPU with .to(kiln::cpu_device())");
  static std::mutex mu;
  static std::set<std::tuple<std::string, int, std::string>> warned;
  std::lock_guard<std::mutex> lock(mu);
  if (!warned.insert({op.name, static_cast<int>(device.type), why}).second) return;
  std::fprintf(stderr,
               "kiln: warning: op '%s': %s; the CPU's kernel runs it instead. "
               "Profiles mark these calls as fallback; set KILN_STRICT_DEVICE=1 to make this an error.\n",
               op.name.c_str(), missing.c_str());
}

KernelFn device_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs, DType dtype,
                       const Attrs& attrs, std::string* why) {
  const Kernel& k = op.kernels[static_cast<int>(device.type)][static_cast<int>(dtype)];
  if (k.fn == nullptr) return nullptr;
  for (size_t i = 0; i < inputs.size() && i < k.input_dtypes.size(); ++i) {
    const auto& takes = k.input_dtypes[i];
    if (!inputs[i] || takes.empty() || std::find(takes.begin(), takes.end(), *inputs[i]) != takes.end()) continue;
    if (why) {
      std::string list;
      for (DType d : takes) list += (list.empty() ? "" : " or ") + std::string(dtype_name(d));
      *why = op.input_name(i) + " of dtype " + dtype_name(*inputs[i]) + " (its kernel takes " + list + ")";
    }
    return nullptr;
  }
  if (k.accepts == nullptr) return k.fn;
  std::vector<DType> dtypes;
  for (const auto& d : inputs)
    if (d) dtypes.push_back(*d);
  return k.accepts(KernelCall{dtypes, attrs}, why) ? k.fn : nullptr;
}

void count_fallback() { g_fallbacks.fetch_add(1, std::memory_order_relaxed); }

namespace {

// A CPU tensor over a copy of t's whole storage, with t's layout.
Tensor host_copy(const Tensor& t) {
  if (!t.defined()) return t;
  const StorageImpl& from = *t.impl().storage;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(from.nbytes, cpu_device());
  copy_between(cpu_device(), impl->storage->data, from.device, from.data, from.nbytes);
  impl->shape = t.shape();
  impl->strides = t.strides();
  impl->offset = t.offset();
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

}  // namespace

// Runs the CPU kernel on copies of the inputs: outputs are copied back to
// `device`, and so are the inputs the op writes in place.
void run_on_cpu(const OpDef& op, KernelFn cpu, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                const Attrs& attrs, Device device, bool widen) {
  count_fallback();
  std::vector<Tensor> host(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) host[i] = host_copy(inputs[i]);
  std::vector<Tensor> host_out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) host_out[i] = Tensor::empty(outputs[i].shape(), outputs[i].dtype());
  if (widen)
    run_widened(op, cpu, Widening::Float32, host, host_out, attrs);
  else
    cpu(host, host_out, attrs);
  for (size_t i = 0; i < outputs.size(); ++i)
    copy_between(device, detail::device_address(outputs[i]), cpu_device(), host_out[i].raw_data(),
                 static_cast<size_t>(host_out[i].numel()) * host_out[i].element_size());
  for (int w : op.written(attrs, inputs.size()))
    if (static_cast<size_t>(w) < inputs.size() && inputs[w].defined()) {
      StorageImpl& dst = *inputs[w].impl().storage;
      copy_between(dst.device, dst.data, cpu_device(), host[w].impl().storage->data, dst.nbytes);
    }
}

void set_strict_device(bool strict) { g_strict.store(strict ? 1 : 0); }

bool strict_device() {
  int s = g_strict.load(std::memory_order_relaxed);
  if (s < 0) {
    const char* env = std::getenv("KILN_STRICT_DEVICE");
    s = env && *env && std::string(env) != "0" ? 1 : 0;
    g_strict.store(s);
  }
  return s == 1;
}

int64_t fallback_count() { return g_fallbacks.load(); }

// A 0-d CPU tensor (the 2 in x * 2 or in 1 - x, a loss's weight) joins an
// op whose other inputs are on another device, copied there by to_device (so
// autograd sees the move), as in PyTorch, in any position. Any other mix of
// devices is an error. The device such a call runs on, if it is one.
static bool is_host_scalar(const Tensor& t) {
  return t.defined() && t.dim() == 0 && t.device().type == DeviceType::CPU;
}
static std::optional<Device> device_for_host_scalars(const OpDef& op, const std::vector<Tensor>& inputs) {
  if (static_cast<size_t>(op.dispatch_input) >= inputs.size() || !inputs[op.dispatch_input].defined())
    return std::nullopt;
  const Tensor& lead = inputs[op.dispatch_input];
  if (lead.device().type == DeviceType::CPU && lead.dim() != 0) return std::nullopt;  // the common case
  std::optional<Device> device;
  bool scalars = false;
  for (const Tensor& t : inputs) {
    if (is_host_scalar(t))
      scalars = true;
    else if (t.defined() && !device)
      device = t.device();
  }
  if (!scalars || !device || device->type == DeviceType::CPU) return std::nullopt;
  return device;
}

// A call on a device whose backend has no kernel for it, of an op that
// decomposes (OpDef::decompose): checked as any call, then run as its
// program of ops, which stays on the device. Traced on the CPU for a graph
// bound for such a device (detail::t_trace_target), likewise.
static std::optional<std::vector<Tensor>> run_decomposed(const OpDef& op, const std::vector<Tensor>& inputs,
                                                         const Attrs& attrs) {
  if (static_cast<size_t>(op.dispatch_input) >= inputs.size() || !inputs[op.dispatch_input].defined())
    return std::nullopt;
  const Tensor& lead = inputs[op.dispatch_input];
  DeviceType where = lead.device().type;
  if (where == DeviceType::CPU && detail::tracing_this_thread()) where = detail::t_trace_target;
  if (where == DeviceType::CPU || op.kernels[static_cast<int>(where)][static_cast<int>(lead.dtype())].fn)
    return std::nullopt;
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs)
    metas.push_back(t.defined() ? TensorMeta{true, t.shape(), t.dtype(), t.device()}
                                : TensorMeta{false, {}, DType::Float32, {}});
  try {
    check_attrs(op, attrs);
    op.infer(metas, attrs);
  } catch (const std::exception& e) {
    if (is_context_attached(e)) throw;
    rethrow_with_context(op, metas, attrs, e);
  }
  return op.decompose(inputs, attrs);
}

namespace {

// The input metadata of a call, kept per thread, nesting depth (a kernel may
// call ops) and input count, so that describing the inputs allocates nothing
// once their shapes have been seen: for small tensors the allocations were a
// third of an op's cost.
class ScratchMetas {
 public:
  explicit ScratchMetas(size_t n) : pool_(t_pool) {
    const int depth = pool_.depth++;
    metas_ = depth < kDepths && n < kCounts ? &pool_.metas[depth][n] : &own_;
    metas_->resize(n);
  }
  ~ScratchMetas() { --pool_.depth; }
  ScratchMetas(const ScratchMetas&) = delete;
  ScratchMetas& operator=(const ScratchMetas&) = delete;
  std::vector<TensorMeta>& metas() { return *metas_; }

 private:
  static constexpr int kDepths = 6;
  static constexpr size_t kCounts = 8;
  struct Pool {
    int depth = 0;
    std::vector<TensorMeta> metas[kDepths][kCounts];
  };
  static thread_local Pool t_pool;
  Pool& pool_;
  std::vector<TensorMeta>* metas_;
  std::vector<TensorMeta> own_;  // deeper or wider than the pool
};
thread_local ScratchMetas::Pool ScratchMetas::t_pool;

}  // namespace

// Whether dispatch may cast the inputs of a call of `op` (to_float, autocast):
// not those of views, transfers, collectives, casts, or calls from a kernel.
static bool castable(const OpDef& op) {
  return !(op.has_tag(kTagView) || op.has_tag(kTagTransfer) || op.has_tag(kTagCollective) || detail::in_kernel() ||
           op.name == "cast");
}

// Inside a ComputeDTypeScope (Cell::to_float): the inputs cast to the compute
// dtype, or to the dtype of the inputs the op writes in place (batch norm's
// running statistics stay in theirs); nothing when no input changes.
static std::optional<std::vector<Tensor>> compute_dtype_inputs(const OpDef& op, const std::vector<Tensor>& inputs,
                                                               const Attrs& attrs, DType dtype) {
  if (!castable(op)) return std::nullopt;
  std::vector<bool> written(inputs.size(), false);
  bool dtype_of_written = false;
  for (int w : op.may_write(attrs, inputs.size())) {
    if (static_cast<size_t>(w) >= inputs.size() || !inputs[w].defined()) continue;
    written[w] = true;
    if (!dtype_of_written && is_floating(inputs[w].dtype())) dtype = inputs[w].dtype(), dtype_of_written = true;
  }
  std::optional<std::vector<Tensor>> cast_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (written[i] || !t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) continue;
    if (!cast_inputs) cast_inputs = inputs;
    (*cast_inputs)[i] = cast(t, dtype);
  }
  return cast_inputs;
}

// Inside an AutocastScope: float32 inputs in the autocast dtype for the ops
// that compute faster there, half-precision inputs in float32 for those that
// need its range or precision; inputs the op writes in place keep their
// dtype. Nothing when no input changes.
static std::optional<std::vector<Tensor>> autocast_inputs(const OpDef& op, const std::vector<Tensor>& inputs,
                                                          const Attrs& attrs, DType lower) {
  const Autocast rule = op.autocast_rule();
  if (rule == Autocast::Keep || !castable(op)) return std::nullopt;
  const bool to_lower = rule == Autocast::Lower;
  const std::vector<int> written = op.may_write(attrs, inputs.size());
  std::optional<std::vector<Tensor>> cast_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    const DType d = t.dtype();
    if (to_lower ? d != DType::Float32 : (d != DType::Float16 && d != DType::BFloat16)) continue;
    if (std::find(written.begin(), written.end(), static_cast<int>(i)) != written.end()) continue;
    if (!cast_inputs) cast_inputs = inputs;
    (*cast_inputs)[i] = cast(t, to_lower ? lower : DType::Float32);
  }
  return cast_inputs;
}

std::vector<Tensor> call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  if (const std::optional<DType> dtype = compute_dtype()) [[unlikely]] {
    if (auto cast_inputs = compute_dtype_inputs(op, inputs, attrs, *dtype)) return call(op, *cast_inputs, attrs);
  } else if (const std::optional<DType> lower = autocast_dtype()) [[unlikely]] {
    if (auto cast_inputs = autocast_inputs(op, inputs, attrs, *lower)) return call(op, *cast_inputs, attrs);
  }
  if (op.decompose) [[unlikely]] {
    if (auto out = run_decomposed(op, inputs, attrs)) return *std::move(out);
  }
  if (const std::optional<Device> d = device_for_host_scalars(op, inputs)) [[unlikely]] {
    std::vector<Tensor> moved = inputs;
    for (Tensor& t : moved)
      if (is_host_scalar(t)) t = t.to(*d);
    return call(op, moved, attrs);
  }
  apply_num_threads_to_this_thread();
  if (DispatchObserver obs = g_observer.load(std::memory_order_relaxed)) obs(op, inputs);
  ScratchMetas scratch(inputs.size());
  std::vector<TensorMeta>& metas = scratch.metas();
  for (size_t i = 0; i < inputs.size(); ++i) {
    TensorMeta& m = metas[i];
    m.defined = inputs[i].defined();
    if (m.defined) {
      m.shape = inputs[i].shape();  // into the shape's kept capacity
      m.dtype = inputs[i].dtype();
      m.device = inputs[i].device();
    } else {
      m.shape.clear();
      m.dtype = DType::Float32;
      m.device = Device{};
    }
  }
  std::vector<TensorMeta> out_metas;
  KernelFn kernel = nullptr;
  bool fallback = false, widened = false;
  Widening how = Widening::None;
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
    std::string why;
    std::vector<std::optional<DType>> dtypes;
    if (d.device.type == DeviceType::CPU) {
      kernel = op.kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(d.dtype)];
    } else {
      for (const TensorMeta& m : metas) dtypes.push_back(m.defined ? std::optional<DType>(m.dtype) : std::nullopt);
      kernel = device_kernel(op, d.device, dtypes, d.dtype, attrs, &why);
    }
    if (kernel == nullptr && (kernel = widening_kernel(op, d.device, dtypes, d.dtype, attrs, &how)) != nullptr)
      widened = true;
    if (kernel == nullptr && (kernel = cpu_fallback(op, d, why, &widened)) != nullptr) fallback = !op.has_tag(kTagView);
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
    const bool transfer = op.has_tag(kTagTransfer);
    for (size_t i = 0; i < out_metas.size(); ++i)
      outputs[i] = Tensor::empty(std::move(out_metas[i].shape), out_metas[i].dtype,
                                 transfer ? out_metas[i].device : metas[op.dispatch_input].device);
  }
  const int64_t profile_start = profiler::detail::active() ? profiler::detail::now_ns() : -1;
  const DeviceTimer timer(metas[op.dispatch_input].device, profile_start >= 0 && !fallback && !view);
  try {
    detail::KernelScope in_kernel(fallback ? cpu_device() : metas[op.dispatch_input].device, profile_start >= 0);
    if (fallback)
      run_on_cpu(op, kernel, inputs, outputs, attrs, metas[op.dispatch_input].device, widened);
    else if (widened)
      run_widened(op, kernel, how, inputs, outputs, attrs);
    else kernel(inputs, outputs, attrs);
    bump_written_versions(op, inputs, attrs);
  } catch (const std::exception& e) {
    if (is_context_attached(e)) throw;
    rethrow_with_context(op, metas, attrs, e);
  }
  if (profile_start >= 0)
    record_profile(&op, op.name, metas[op.dispatch_input].device, inputs, outputs, profile_start, fallback,
                   timer.stop());
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

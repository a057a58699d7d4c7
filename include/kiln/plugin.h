#pragma once
// C++ helpers for writing an op package against Kiln's plugin C ABI
// (kiln/plugin_abi.h). Header-only: a package links no Kiln library, so it
// loads into any Kiln release with the same ABI version. docs/custom_ops.md
// walks through a package; examples/custom_op is a complete one.
//
//   KILN_PLUGIN(my_ops, reg) {
//     reg.op("scale")
//         .inputs({"x"}).outputs({"y"}).attrs({"factor:float=2"})
//         .infer([](kiln::plugin::InferContext& c) { c.set_output(0, c.input(0)); })
//         .grad([](kiln::plugin::GradContext& g) {
//           auto f = kiln::plugin::full({}, g.attrs().get_float("factor"), g.input(0).dtype());
//           g.set_input_grad(0, g.output_grad(0) * f);
//         })
//         .kernel("cpu", kiln::plugin::DType::Float32, scale_kernel);
//   }
//
// Exceptions thrown by a package's functions become Kiln errors that name the
// package and the op; none crosses the ABI.
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/plugin_abi.h"

#if defined(_WIN32)
#define KILN_PLUGIN_EXPORT extern "C" __declspec(dllexport)
#else
#define KILN_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace kiln::plugin {

enum class DType : int32_t {
  Float32 = KILN_FLOAT32,
  Float64 = KILN_FLOAT64,
  Float16 = KILN_FLOAT16,
  BFloat16 = KILN_BFLOAT16,
  Int32 = KILN_INT32,
  Int64 = KILN_INT64,
  UInt8 = KILN_UINT8,
  Bool = KILN_BOOL,
  Int8 = KILN_INT8,
};

enum Tag : uint32_t {
  kElementwise = KILN_TAG_ELEMENTWISE,
  kReduction = KILN_TAG_REDUCTION,
  kNondifferentiable = KILN_TAG_NONDIFFERENTIABLE,
  kFusible = KILN_TAG_FUSIBLE,
  kBackward = KILN_TAG_BACKWARD,
  kLoss = KILN_TAG_LOSS,
};

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The host's function table, set when the package registers.
inline const kiln_host_api*& host_slot() {
  static const kiln_host_api* api = nullptr;
  return api;
}
inline const kiln_host_api& host() {
  if (!host_slot()) throw Error("kiln::plugin used before the package was registered");
  return *host_slot();
}

// Throws the host's message when a host function failed.
inline void check(bool ok) {
  if (!ok) throw Error(host().last_error());
}

class Tensor {
 public:
  Tensor() = default;
  // Takes over a reference the host handed out.
  static Tensor adopt(kiln_tensor* h) {
    Tensor t;
    t.h_ = h;
    return t;
  }
  // A new reference to a tensor the host lends for a call.
  static Tensor borrow(kiln_tensor* h) { return adopt(h ? host().tensor_retain(h) : nullptr); }
  Tensor(const Tensor& o) : h_(o.h_ ? host().tensor_retain(o.h_) : nullptr) {}
  Tensor(Tensor&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Tensor& operator=(Tensor o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Tensor() {
    if (h_) host().tensor_release(h_);
  }

  bool defined() const { return h_ != nullptr; }
  kiln_tensor* handle() const { return h_; }
  kiln_tensor* release() { return std::exchange(h_, nullptr); }

  DType dtype() const { return static_cast<DType>(host().tensor_dtype(h_)); }
  int dim() const { return host().tensor_ndim(h_); }
  std::vector<int64_t> shape() const {
    const int64_t* s = host().tensor_shape(h_);
    return std::vector<int64_t>(s, s + dim());
  }
  int64_t size(int axis) const { return host().tensor_shape(h_)[axis < 0 ? axis + dim() : axis]; }
  const int64_t* strides() const { return host().tensor_strides(h_); }
  int64_t numel() const { return host().tensor_numel(h_); }
  bool is_contiguous() const { return host().tensor_is_contiguous(h_) != 0; }
  std::string device() const { return host().tensor_device(h_); }
  int device_index() const { return host().tensor_device_index(h_); }
  // The first element's address: in the device's memory for a device tensor.
  template <typename T>
  T* data() const {
    return static_cast<T*>(host().tensor_data(h_));
  }
  Tensor contiguous() const {
    if (is_contiguous()) return *this;
    kiln_tensor* t = host().tensor_contiguous(h_);
    check(t != nullptr);
    return adopt(t);
  }

 private:
  kiln_tensor* h_ = nullptr;
};

// Attributes to call an op with.
class Attrs {
 public:
  Attrs() : a_(host().attrs_new()) {}
  Attrs(const Attrs&) = delete;
  Attrs& operator=(const Attrs&) = delete;
  ~Attrs() { host().attrs_release(a_); }
  Attrs& set(const char* name, int64_t v) { return host().attrs_set_int(a_, name, v), *this; }
  Attrs& set(const char* name, int v) { return set(name, static_cast<int64_t>(v)); }
  Attrs& set(const char* name, double v) { return host().attrs_set_float(a_, name, v), *this; }
  Attrs& set(const char* name, bool v) { return host().attrs_set_bool(a_, name, v ? 1 : 0), *this; }
  Attrs& set(const char* name, const char* v) { return host().attrs_set_string(a_, name, v), *this; }
  Attrs& set(const char* name, const std::vector<int64_t>& v) {
    return host().attrs_set_ints(a_, name, v.data(), static_cast<int32_t>(v.size())), *this;
  }
  const kiln_attrs* get() const { return a_; }

 private:
  kiln_attrs* a_;
};

// Runs an op (built in, or from any loaded package) with autograd.
inline std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs, const Attrs* attrs = nullptr) {
  std::vector<kiln_tensor*> in;
  for (const Tensor& t : inputs) in.push_back(t.handle());
  kiln_tensor* out[16] = {};
  int32_t n = 0;
  check(host().call_op(op.c_str(), in.data(), static_cast<int32_t>(in.size()), attrs ? attrs->get() : nullptr, out,
                       16, &n) == KILN_OK);
  std::vector<Tensor> result;
  for (int32_t i = 0; i < n; ++i) result.push_back(Tensor::adopt(out[i]));
  return result;
}
inline Tensor call1(const std::string& op, const std::vector<Tensor>& inputs, const Attrs* attrs = nullptr) {
  return call(op, inputs, attrs).at(0);
}
inline Tensor call1(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs) {
  return call(op, inputs, &attrs).at(0);
}
inline Tensor full(const std::vector<int64_t>& shape, double value, DType dtype) {
  kiln_tensor* t =
      host().tensor_full(shape.data(), static_cast<int32_t>(shape.size()), static_cast<int32_t>(dtype), value);
  check(t != nullptr);
  return Tensor::adopt(t);
}
// Runs fn(begin, end) over [0, n) in chunks of at least `grain` on Kiln's
// intra-op threads. An exception in fn reaches the caller after all chunks.
template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  struct State {
    F* fn;
    std::mutex mutex;
    std::exception_ptr error;
  } state{&fn, {}, nullptr};
  host().parallel_for(n, grain,
                      [](int64_t begin, int64_t end, void* user) {
                        auto* s = static_cast<State*>(user);
                        try {
                          (*s->fn)(begin, end);
                        } catch (...) {
                          std::lock_guard<std::mutex> lock(s->mutex);
                          if (!s->error) s->error = std::current_exception();
                        }
                      },
                      &state);
  if (state.error) std::rethrow_exception(state.error);
}

inline Tensor operator+(const Tensor& a, const Tensor& b) { return call1("add", {a, b}); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return call1("sub", {a, b}); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return call1("mul", {a, b}); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return call1("div", {a, b}); }

// The attributes of a call, with the defaults the op declared.
class AttrsView {
 public:
  AttrsView(const kiln_attrs* a, const std::map<std::string, std::string>* defaults) : a_(a), defaults_(defaults) {}
  bool has(const char* name) const {
    int64_t i;
    double f;
    int32_t b, n;
    const char* s;
    const int64_t* is;
    const double* fs;
    const kiln_host_api& h = host();
    return h.attr_int(a_, name, &i) || h.attr_float(a_, name, &f) || h.attr_bool(a_, name, &b) ||
           h.attr_string(a_, name, &s) || h.attr_ints(a_, name, &is, &n) || h.attr_floats(a_, name, &fs, &n);
  }
  int64_t get_int(const char* name) const {
    int64_t v;
    return host().attr_int(a_, name, &v) ? v : std::strtoll(fallback(name).c_str(), nullptr, 10);
  }
  double get_float(const char* name) const {
    double v;
    if (host().attr_float(a_, name, &v)) return v;
    int64_t i;
    if (host().attr_int(a_, name, &i)) return static_cast<double>(i);
    return std::strtod(fallback(name).c_str(), nullptr);
  }
  bool get_bool(const char* name) const {
    int32_t v;
    if (host().attr_bool(a_, name, &v)) return v != 0;
    std::string d = fallback(name);
    return d == "true" || d == "1";
  }
  std::string get_string(const char* name) const {
    const char* v;
    return host().attr_string(a_, name, &v) ? std::string(v) : fallback(name);
  }
  std::vector<int64_t> get_ints(const char* name) const {
    const int64_t* v;
    int32_t n;
    if (host().attr_ints(a_, name, &v, &n)) return std::vector<int64_t>(v, v + n);
    fallback(name);  // only "[]" defaults are taken for lists
    return {};
  }
  const kiln_attrs* get() const { return a_; }

 private:
  std::string fallback(const char* name) const {
    auto it = defaults_ ? defaults_->find(name) : decltype(defaults_->end()){};
    if (!defaults_ || it == defaults_->end())
      throw Error(std::string("attribute '") + name + "' is required and was not given");
    return it->second;
  }
  const kiln_attrs* a_;
  const std::map<std::string, std::string>* defaults_;
};

struct Meta {
  bool defined = true;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
};

class InferContext {
 public:
  InferContext(const kiln_meta* in, int32_t n_in, kiln_meta_out* out, int32_t n_out, AttrsView attrs)
      : attrs_(attrs), out_(out), n_out_(n_out) {
    for (int32_t i = 0; i < n_in; ++i)
      inputs_.push_back({in[i].defined != 0, static_cast<DType>(in[i].dtype),
                         std::vector<int64_t>(in[i].shape, in[i].shape + (in[i].defined ? in[i].ndim : 0))});
  }
  size_t num_inputs() const { return inputs_.size(); }
  const Meta& input(size_t i) const { return inputs_.at(i); }
  const AttrsView& attrs() const { return attrs_; }
  void set_output(size_t i, const Meta& m) { set_output(i, m.dtype, m.shape); }
  void set_output(size_t i, DType dtype, const std::vector<int64_t>& shape) {
    if (static_cast<int32_t>(i) >= n_out_) throw Error("output " + std::to_string(i) + " does not exist");
    if (shape.size() > KILN_PLUGIN_MAX_DIMS) throw Error("an output has more than 16 dimensions");
    out_[i].dtype = static_cast<int32_t>(dtype);
    out_[i].ndim = static_cast<int32_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) out_[i].shape[d] = shape[d];
  }

 private:
  std::vector<Meta> inputs_;
  AttrsView attrs_;
  kiln_meta_out* out_;
  int32_t n_out_;
};

class KernelContext {
 public:
  KernelContext(kiln_tensor* const* in, int32_t n_in, kiln_tensor* const* out, int32_t n_out, AttrsView attrs)
      : in_(in), n_in_(n_in), out_(out), n_out_(n_out), attrs_(attrs) {}
  size_t num_inputs() const { return static_cast<size_t>(n_in_); }
  // Borrowed for the call; undefined for an omitted optional input.
  Tensor input(size_t i) const { return Tensor::borrow(i < num_inputs() ? in_[i] : nullptr); }
  Tensor output(size_t i) const {
    if (static_cast<int32_t>(i) >= n_out_) throw Error("output " + std::to_string(i) + " does not exist");
    return Tensor::borrow(out_[i]);
  }
  const AttrsView& attrs() const { return attrs_; }
  // The stream the kernel's device work goes to: a cudaStream_t in a CUDA
  // kernel (nullptr: the default stream), nullptr on the CPU. A Kiln older
  // than this function gives nullptr, its default stream.
  void* stream() const {
    if (host().struct_size < offsetof(kiln_host_api, kernel_stream) + sizeof(void*)) return nullptr;
    return host().kernel_stream();
  }

 private:
  kiln_tensor* const* in_;
  int32_t n_in_;
  kiln_tensor* const* out_;
  int32_t n_out_;
  AttrsView attrs_;
};

class GradContext {
 public:
  GradContext(const kiln_grad_args* a, AttrsView attrs) : a_(a), attrs_(attrs) {}
  Tensor input(size_t i) const { return Tensor::borrow(i < size_t(a_->n_inputs) ? a_->inputs[i] : nullptr); }
  Tensor output(size_t i) const { return Tensor::borrow(i < size_t(a_->n_outputs) ? a_->outputs[i] : nullptr); }
  // Undefined where output i received no gradient.
  Tensor output_grad(size_t i) const {
    return Tensor::borrow(i < size_t(a_->n_outputs) ? a_->output_grads[i] : nullptr);
  }
  bool needs_grad(size_t i) const { return i < size_t(a_->n_inputs) && a_->needs_grad[i] != 0; }
  const AttrsView& attrs() const { return attrs_; }
  void set_input_grad(size_t i, Tensor g) {
    if (i >= size_t(a_->n_inputs)) throw Error("input " + std::to_string(i) + " does not exist");
    if (a_->input_grads[i]) host().tensor_release(a_->input_grads[i]);
    a_->input_grads[i] = g.release();
  }

 private:
  const kiln_grad_args* a_;
  AttrsView attrs_;
};

using InferFn = std::function<void(InferContext&)>;
using KernelFn = std::function<void(KernelContext&)>;
using GradFn = std::function<void(GradContext&)>;

namespace detail {

// Runs a package function, turning an exception into the ABI's status.
template <typename F>
int guarded(kiln_status* status, F&& f) {
  try {
    f();
    return KILN_OK;
  } catch (const std::exception& e) {
    host().set_error(status, e.what());
  } catch (...) {
    host().set_error(status, "unknown exception");
  }
  return KILN_ERROR;
}

// What one op's callbacks need; lives as long as the process (packages are
// never unloaded).
struct OpState {
  std::string name;
  std::map<std::string, std::string> defaults;  // attribute -> its default's text
  InferFn infer;
  GradFn grad;
  std::vector<std::unique_ptr<KernelFn>> kernels;
};

inline int infer_trampoline(const kiln_meta* in, int32_t n_in, const kiln_attrs* attrs, kiln_meta_out* out,
                            int32_t n_out, void* user, kiln_status* status) {
  auto* op = static_cast<OpState*>(user);
  return guarded(status, [&] {
    InferContext c(in, n_in, out, n_out, AttrsView(attrs, &op->defaults));
    op->infer(c);
  });
}

inline int grad_trampoline(const kiln_grad_args* args, void* user, kiln_status* status) {
  auto* op = static_cast<OpState*>(user);
  return guarded(status, [&] {
    GradContext c(args, AttrsView(args->attrs, &op->defaults));
    op->grad(c);
  });
}

struct KernelState {
  OpState* op;
  KernelFn fn;
};

inline int kernel_trampoline(kiln_tensor* const* in, int32_t n_in, kiln_tensor* const* out, int32_t n_out,
                             const kiln_attrs* attrs, void* user, kiln_status* status) {
  auto* k = static_cast<KernelState*>(user);
  return guarded(status, [&] {
    KernelContext c(in, n_in, out, n_out, AttrsView(attrs, &k->op->defaults));
    k->fn(c);
  });
}

// "eps:float=1e-6" -> {eps, 1e-6}; "axes:ints=[] (all)" -> {axes, []}.
inline void parse_default(const std::string& spec, std::map<std::string, std::string>& out) {
  size_t eq = spec.find('=');
  if (eq == std::string::npos) return;
  std::string name = spec.substr(0, spec.find_first_of(":=?"));
  std::string value = spec.substr(eq + 1);
  value = value.substr(0, value.find(' '));
  out[name] = value;
}

}  // namespace detail

class Registry;

// Describes one op; submitted to Kiln when the package's registration
// function returns.
class OpBuilder {
 public:
  explicit OpBuilder(std::string name) : state_(new detail::OpState{std::move(name), {}, {}, {}, {}}) {}
  OpBuilder& inputs(std::vector<std::string> v) { return inputs_ = std::move(v), *this; }
  OpBuilder& outputs(std::vector<std::string> v) { return outputs_ = std::move(v), *this; }
  OpBuilder& attrs(std::vector<std::string> v) {
    attrs_ = std::move(v);
    for (const auto& a : attrs_) detail::parse_default(a, state_->defaults);
    return *this;
  }
  OpBuilder& tags(uint32_t t) { return tags_ |= t, *this; }  // adds to the tags set so far
  OpBuilder& category(std::string c) { return category_ = std::move(c), *this; }
  OpBuilder& infer(InferFn f) { return state_->infer = std::move(f), *this; }
  OpBuilder& grad(GradFn f) { return state_->grad = std::move(f), *this; }
  OpBuilder& differentiable_inputs(std::vector<int32_t> v) { return differentiable_ = std::move(v), *this; }
  // Writes and reads the op as one node `type` of the ONNX domain `domain`.
  OpBuilder& onnx(std::string domain, std::string type, int32_t domain_version = 1) {
    onnx_domain_ = std::move(domain);
    onnx_type_ = std::move(type);
    onnx_version_ = domain_version;
    return *this;
  }
  // An elementwise formula in float and double: kernels for every float
  // dtype on every backend with a block runner, and graph fusion.
  OpBuilder& elementwise(int32_t arity, kiln_math_f32 f32, kiln_math_f64 f64) {
    arity_ = arity;
    f32_ = f32;
    f64_ = f64;
    tags_ |= kElementwise;
    return *this;
  }
  // A kernel for `backend` ("cpu", "cuda", ...) and each of `dtypes`.
  OpBuilder& kernel(std::string backend, std::initializer_list<DType> dtypes, KernelFn fn) {
    for (DType d : dtypes) kernels_.push_back({backend, d, fn});
    return *this;
  }
  OpBuilder& kernel(std::string backend, DType dtype, KernelFn fn) { return kernel(std::move(backend), {dtype}, fn); }

 private:
  friend class Registry;
  struct KernelSpec {
    std::string backend;
    DType dtype;
    KernelFn fn;
  };
  void submit(const kiln_host_api& api, kiln_registrar* r) {
    auto c_strings = [](const std::vector<std::string>& v) {
      std::vector<const char*> out;
      for (const auto& s : v) out.push_back(s.c_str());
      return out;
    };
    std::vector<const char*> in = c_strings(inputs_), out = c_strings(outputs_), at = c_strings(attrs_);
    kiln_op_def d{};
    d.struct_size = sizeof(kiln_op_def);
    d.name = state_->name.c_str();
    d.inputs = in.data();
    d.n_inputs = static_cast<int32_t>(in.size());
    d.outputs = out.data();
    d.n_outputs = static_cast<int32_t>(out.size());
    d.attrs = at.data();
    d.n_attrs = static_cast<int32_t>(at.size());
    d.tags = tags_;
    d.category = category_.empty() ? nullptr : category_.c_str();
    d.infer = state_->infer ? detail::infer_trampoline : nullptr;
    d.infer_user = state_.get();
    d.grad = state_->grad ? detail::grad_trampoline : nullptr;
    d.grad_user = state_.get();
    d.differentiable_inputs = differentiable_.empty() ? nullptr : differentiable_.data();
    d.n_differentiable_inputs = static_cast<int32_t>(differentiable_.size());
    d.onnx_domain = onnx_domain_.empty() ? nullptr : onnx_domain_.c_str();
    d.onnx_type = onnx_type_.empty() ? nullptr : onnx_type_.c_str();
    d.onnx_domain_version = onnx_version_;
    d.math_arity = arity_;
    d.math_f32 = f32_;
    d.math_f64 = f64_;
    check(api.define_op(r, &d) == KILN_OK);
    for (auto& k : kernels_) {
      auto* ks = new detail::KernelState{state_.get(), k.fn};  // lives as long as the package
      check(api.register_kernel(r, state_->name.c_str(), k.backend.c_str(), static_cast<int32_t>(k.dtype),
                                detail::kernel_trampoline, ks) == KILN_OK);
    }
    state_.release();  // its callbacks are now Kiln's
  }

  std::unique_ptr<detail::OpState> state_;
  std::vector<std::string> inputs_, outputs_, attrs_;
  uint32_t tags_ = 0;
  std::string category_;
  std::vector<int32_t> differentiable_;
  std::string onnx_domain_, onnx_type_;
  int32_t onnx_version_ = 1;
  int32_t arity_ = 0;
  kiln_math_f32 f32_ = nullptr;
  kiln_math_f64 f64_ = nullptr;
  std::vector<KernelSpec> kernels_;
};

// What the package's registration function fills.
class Registry {
 public:
  OpBuilder& op(std::string name) {
    ops_.push_back(std::make_unique<OpBuilder>(std::move(name)));
    return *ops_.back();
  }
  void submit(const kiln_host_api& api, kiln_registrar* r) {
    for (auto& op : ops_) op->submit(api, r);
  }

 private:
  std::vector<std::unique_ptr<OpBuilder>> ops_;
};

}  // namespace kiln::plugin

// Defines a package's entry points; the body fills `REG` (a
// kiln::plugin::Registry&). NAME names the package in `kiln ops` and errors.
#define KILN_PLUGIN(NAME, REG)                                                                          \
  static void kiln_plugin_define_##NAME(::kiln::plugin::Registry& REG);                                 \
  KILN_PLUGIN_EXPORT uint32_t kiln_plugin_abi_version(void) { return KILN_PLUGIN_ABI_VERSION; }          \
  KILN_PLUGIN_EXPORT const char* kiln_plugin_name(void) { return #NAME; }                                \
  KILN_PLUGIN_EXPORT int kiln_plugin_register(const kiln_host_api* api, kiln_registrar* r, kiln_status* s) { \
    if (api->abi_version != KILN_PLUGIN_ABI_VERSION) return KILN_ERROR;                                   \
    ::kiln::plugin::host_slot() = api;                                                                    \
    return ::kiln::plugin::detail::guarded(s, [&] {                                                       \
      ::kiln::plugin::Registry reg;                                                                       \
      kiln_plugin_define_##NAME(reg);                                                                     \
      reg.submit(*api, r);                                                                                \
    });                                                                                                   \
  }                                                                                                       \
  static void kiln_plugin_define_##NAME(::kiln::plugin::Registry& REG)

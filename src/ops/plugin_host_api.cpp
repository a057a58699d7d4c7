#include <cstring>
#include <exception>

#include "kiln/backend.h"
#include "kiln/parallel.h"
#include "kiln/registry.h"
#include "ops/plugin_host.h"

namespace kiln::plugin_host {
namespace {

thread_local std::string last_error_message;

const Tensor& t_of(const kiln_tensor* h) { return *reinterpret_cast<const Tensor*>(h); }
const Attrs& a_of(const kiln_attrs* a) { return *reinterpret_cast<const Attrs*>(a); }
Attrs& a_of(kiln_attrs* a) { return *reinterpret_cast<Attrs*>(a); }

// Runs a host function for a package: an exception becomes last_error.
template <typename F, typename R>
R guarded(F&& f, R on_error) {
  try {
    return f();
  } catch (const std::exception& e) {
    set_last_error(e.what());
  } catch (...) {
    set_last_error("unknown error");
  }
  return on_error;
}

template <typename T>
const T* attr(const kiln_attrs* a, const char* name) {
  if (!a || !name) return nullptr;
  const AttrValue* v = a_of(a).find(name);
  return v ? std::get_if<T>(v) : nullptr;
}

}  // namespace

void set_last_error(const std::string& message) { last_error_message = message; }

bool valid_dtype(int32_t dtype) { return dtype >= 0 && dtype < kNumDTypes; }

kiln_host_api base_api() {
  kiln_host_api api{};
  api.abi_version = KILN_PLUGIN_ABI_VERSION;
  api.struct_size = sizeof(kiln_host_api);
  api.kiln_version = KILN_VERSION;
  api.set_error = [](kiln_status* s, const char* message) {
    if (s) reinterpret_cast<Status*>(s)->message = message ? message : "";
  };
  api.last_error = [] { return last_error_message.c_str(); };

  api.tensor_dtype = [](const kiln_tensor* t) { return static_cast<int32_t>(t_of(t).dtype()); };
  api.tensor_ndim = [](const kiln_tensor* t) { return static_cast<int32_t>(t_of(t).dim()); };
  api.tensor_shape = [](const kiln_tensor* t) { return t_of(t).shape().data(); };
  api.tensor_strides = [](const kiln_tensor* t) { return t_of(t).strides().data(); };
  api.tensor_numel = [](const kiln_tensor* t) { return t_of(t).numel(); };
  // A device kernel's tensors are in its device's memory: their address there.
  api.tensor_data = [](const kiln_tensor* t) {
    const Tensor& x = t_of(t);
    return x.device().type == DeviceType::CPU ? x.raw_data() : x.device_data();
  };
  api.tensor_is_contiguous = [](const kiln_tensor* t) { return static_cast<int32_t>(t_of(t).is_contiguous()); };
  api.tensor_device = [](const kiln_tensor* t) { return device_type_name(t_of(t).device().type); };
  api.tensor_device_index = [](const kiln_tensor* t) { return static_cast<int32_t>(t_of(t).device().index); };
  api.tensor_retain = [](const kiln_tensor* t) { return t ? handle(t_of(t)) : nullptr; };
  api.tensor_release = [](kiln_tensor* t) { release(t); };
  api.tensor_contiguous = [](const kiln_tensor* t) {
    return guarded([&] { return handle(t_of(t).contiguous()); }, static_cast<kiln_tensor*>(nullptr));
  };
  api.tensor_full = [](const int64_t* shape, int32_t ndim, int32_t dtype, double value) {
    return guarded(
        [&] {
          KILN_CHECK(valid_dtype(dtype), "tensor_full: ", dtype, " is not a Kiln dtype (KILN_FLOAT32 to KILN_INT8)");
          KILN_CHECK(ndim >= 0 && (ndim == 0 || shape), "tensor_full: a shape of ", ndim, " dimensions");
          return handle(full(Shape(shape, shape + ndim), value, static_cast<DType>(dtype)));
        },
        static_cast<kiln_tensor*>(nullptr));
  };

  api.attr_int = [](const kiln_attrs* a, const char* name, int64_t* v) {
    const int64_t* p = attr<int64_t>(a, name);
    if (p) *v = *p;
    return static_cast<int32_t>(p != nullptr);
  };
  api.attr_float = [](const kiln_attrs* a, const char* name, double* v) {
    const double* p = attr<double>(a, name);
    if (p) *v = *p;
    return static_cast<int32_t>(p != nullptr);
  };
  api.attr_bool = [](const kiln_attrs* a, const char* name, int32_t* v) {
    const bool* p = attr<bool>(a, name);
    if (p) *v = *p ? 1 : 0;
    return static_cast<int32_t>(p != nullptr);
  };
  api.attr_string = [](const kiln_attrs* a, const char* name, const char** v) {
    const std::string* p = attr<std::string>(a, name);
    if (p) *v = p->c_str();
    return static_cast<int32_t>(p != nullptr);
  };
  api.attr_ints = [](const kiln_attrs* a, const char* name, const int64_t** v, int32_t* n) {
    const auto* p = attr<std::vector<int64_t>>(a, name);
    if (p) {
      *v = p->data();
      *n = static_cast<int32_t>(p->size());
    }
    return static_cast<int32_t>(p != nullptr);
  };
  api.attr_floats = [](const kiln_attrs* a, const char* name, const double** v, int32_t* n) {
    const auto* p = attr<std::vector<double>>(a, name);
    if (p) {
      *v = p->data();
      *n = static_cast<int32_t>(p->size());
    }
    return static_cast<int32_t>(p != nullptr);
  };
  api.attrs_new = [] { return reinterpret_cast<kiln_attrs*>(new Attrs()); };
  api.attrs_release = [](kiln_attrs* a) { delete reinterpret_cast<Attrs*>(a); };
  api.attrs_set_int = [](kiln_attrs* a, const char* name, int64_t v) { a_of(a).set(name, v); };
  api.attrs_set_float = [](kiln_attrs* a, const char* name, double v) { a_of(a).set(name, v); };
  api.attrs_set_bool = [](kiln_attrs* a, const char* name, int32_t v) { a_of(a).set(name, v != 0); };
  api.attrs_set_string = [](kiln_attrs* a, const char* name, const char* v) { a_of(a).set(name, std::string(v)); };
  api.attrs_set_ints = [](kiln_attrs* a, const char* name, const int64_t* v, int32_t n) {
    a_of(a).set(name, std::vector<int64_t>(v, v + n));
  };

  api.call_op = [](const char* op, kiln_tensor* const* inputs, int32_t n_inputs, const kiln_attrs* attrs,
                   kiln_tensor** outputs, int32_t max_outputs, int32_t* n_outputs) {
    return guarded(
        [&] {
          std::vector<Tensor> in;
          for (int32_t i = 0; i < n_inputs; ++i) in.push_back(inputs[i] ? t_of(inputs[i]) : Tensor());
          std::vector<Tensor> out = call(op, in, attrs ? a_of(attrs) : Attrs{});
          KILN_CHECK(static_cast<int32_t>(out.size()) <= max_outputs, "op '", op, "' returned ", out.size(),
                     " outputs; the caller has room for ", max_outputs);
          for (size_t i = 0; i < out.size(); ++i) outputs[i] = handle(out[i]);
          *n_outputs = static_cast<int32_t>(out.size());
          return static_cast<int>(KILN_OK);
        },
        static_cast<int>(KILN_ERROR));
  };
  api.parallel_for = [](int64_t n, int64_t grain, void (*fn)(int64_t, int64_t, void*), void* user) {
    kiln::parallel_for(n, grain, [&](int64_t begin, int64_t end) { fn(begin, end, user); });
  };
  api.kernel_stream = []() -> void* {
    return guarded([] { return kernel_context().stream.handle; }, static_cast<void*>(nullptr));
  };
  return api;
}

}  // namespace kiln::plugin_host

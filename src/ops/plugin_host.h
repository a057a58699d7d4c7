#pragma once
// Kiln's side of the plugin C ABI: tensors, attributes and op calls handed to
// packages as handles. A kiln_tensor* is a heap-held kiln::Tensor (one
// reference), a kiln_attrs* a kiln::Attrs.
#include <string>
#include <vector>

#include "kiln/plugin_abi.h"
#include "kiln/tensor.h"

namespace kiln::plugin_host {

inline kiln_tensor* handle(const Tensor& t) {
  return t.defined() ? reinterpret_cast<kiln_tensor*>(new Tensor(t)) : nullptr;
}
inline Tensor& tensor(kiln_tensor* h) { return *reinterpret_cast<Tensor*>(h); }
inline void release(kiln_tensor* h) { delete reinterpret_cast<Tensor*>(h); }
inline const kiln_attrs* handle(const Attrs& a) { return reinterpret_cast<const kiln_attrs*>(&a); }

// Handles for the length of one call into a package.
struct Handles {
  std::vector<kiln_tensor*> items;
  explicit Handles(const std::vector<Tensor>& ts) {
    for (const Tensor& t : ts) items.push_back(handle(t));
  }
  ~Handles() {
    for (kiln_tensor* h : items) release(h);
  }
  Handles(const Handles&) = delete;
  Handles& operator=(const Handles&) = delete;
  kiln_tensor* const* data() const { return items.data(); }
  int32_t size() const { return static_cast<int32_t>(items.size()); }
};

// A status a package callback writes its message into.
struct Status {
  std::string message;
  kiln_status* get() { return reinterpret_cast<kiln_status*>(this); }
};

// The table without the registration functions (op_library.cpp adds those).
kiln_host_api base_api();

// Host functions report failures here, per thread (kiln_host_api.last_error).
void set_last_error(const std::string& message);

bool valid_dtype(int32_t dtype);

}  // namespace kiln::plugin_host

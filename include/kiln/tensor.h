#pragma once
// Tensor: a typed, strided view of a Storage, with autograd metadata.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/shape.h"
#include "kiln/storage.h"

namespace kiln {

namespace autograd {
struct Node;
}
class Generator;

struct TensorImpl {
  Storage storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;

  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;  // null for leaves
  int output_nr = 0;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Allocates uninitialised contiguous memory.
  static Tensor empty(Shape shape, DType dtype = DType::Float32, Device device = Device{});
  // The same in host memory that `device` copies to and from fastest
  // (page-locked for a GPU, from its backend's caching pinned allocator):
  // a CPU tensor for staging transfers.
  static Tensor empty_pinned(Shape shape, DType dtype, Device device);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t axis) const;
  int64_t numel() const;
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  std::string str() const;  // full printout, PyTorch style
  std::string meta_str() const;  // "float32[2, 3]"

  // Raw access to the first element (honours the storage offset).
  void* raw_data() const;
  // The first element's address in its device's memory, for that backend's
  // kernels and copies (a backend library's too): on a device whose memory
  // is not host memory, an address the host must not follow. Host code
  // reads through raw_data(), which checks.
  void* device_data() const;
  template <typename T>
  T* data() const {
    KILN_CHECK(DTypeOf<T>::value == dtype(), "Tensor::data<", dtype_name(DTypeOf<T>::value),
               ">() called on a ", dtype_name(dtype()), " tensor; use the matching type or .to(dtype)");
    return static_cast<T*>(raw_data());
  }
  // The value of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  // Copies all elements (in logical order) into a vector of T.
  template <typename T>
  std::vector<T> to_vector() const;

  // Views (no copy): the result shares storage with *this.
  Tensor view(const Shape& shape) const;     // requires compatible strides
  Tensor reshape(const Shape& shape) const;  // view when possible, copy otherwise
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor slice(int64_t axis, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t axis, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(std::optional<int64_t> axis = std::nullopt) const;
  Tensor unsqueeze(int64_t axis) const;
  Tensor flatten(int64_t start_axis = 0, int64_t end_axis = -1) const;
  Tensor t() const { return transpose(-2, -1); }

  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor when it is there already), through the
  // `to_device` op: autograd carries gradients back to the source device.
  Tensor to(Device device) const;

  // In-place writes (bump the version counter; refused on tensors autograd needs).
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double factor);

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& set_requires_grad(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return Tensor(impl().grad); }
  void zero_grad() { impl().grad.reset(); }
  std::shared_ptr<autograd::Node> grad_fn() const { return impl().grad_fn; }
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;

  TensorImpl& impl() const {
    KILN_CHECK(impl_ != nullptr, "use of an undefined Tensor; create it first (e.g. kiln::zeros)");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Creation, on `device` (the CPU unless given): constants, ranges and
// random numbers are made where the tensor lives, by its backend. Random
// numbers come from a counter-based generator (kiln/generator.h), so one
// seed gives the same tensor on every device.
Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = {});
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = {});
Tensor scalar_tensor(double value, DType dtype = DType::Float32);
// On t's device, with its dtype and shape.
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Float32, Device device = {});
Tensor arange(int64_t end, DType dtype = DType::Int64, Device device = {});
Tensor linspace(double start, double end, int64_t steps, DType dtype = DType::Float32, Device device = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = DType::Float32, Device device = {});
Tensor rand(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr, Device device = {});
Tensor randn(const Shape& shape, DType dtype = DType::Float32, Generator* gen = nullptr, Device device = {});
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::Int64,
               Generator* gen = nullptr, Device device = {});
// Copies `nbytes` of host memory holding elements of `dtype`.
Tensor from_buffer(const void* data, const Shape& shape, DType dtype);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape);
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, Shape{static_cast<int64_t>(values.size())});
}

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace kiln

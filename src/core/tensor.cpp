#include "kiln/tensor.h"

#include <atomic>
#include <cstring>

#include "core/device_memory.h"
#include "core/read_observer.h"
#include "kiln/backend.h"
#include "kiln/caller_language.h"
#include "kiln/grad_mode.h"

namespace kiln {
namespace detail {
thread_local ReadObserver t_read_observer = nullptr;
thread_local VaryingQuery t_varying_query = nullptr;
thread_local int t_kernel_depth = 0;
thread_local Device t_kernel_device;
thread_local bool t_kernel_timed = false;
}  // namespace detail

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape)
    KILN_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape), "; sizes must be >= 0");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(nbytes_of(shape, dtype_size(dtype)), device);
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty_pinned(Shape shape, DType dtype, Device device) {
  if (device.type == DeviceType::CPU) return empty(std::move(shape), dtype);
  Allocator& pinned = backend(device.type).pinned_allocator();
  const size_t bytes = nbytes_of(shape, dtype_size(dtype));
  void* data = pinned.allocate(bytes);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      external_storage(data, bytes, cpu_device(), [&pinned, data, bytes] { pinned.deallocate(data, bytes); });
  impl->strides = contiguous_strides(shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t axis) const { return shape()[normalize_axis(axis, dim())]; }
int64_t Tensor::numel() const { return numel_of(shape()); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const auto& sh = shape();
  const auto& st = strides();
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

namespace detail {

bool host_readable(Device device) {
  if (device.type == DeviceType::CPU) return true;
  const Backend* b = find_backend(device.type);
  return b != nullptr && b->host_memory();
}

namespace {
std::atomic<int64_t> g_host_read_copies{0};
}  // namespace

int64_t host_read_copies() { return g_host_read_copies.load(); }

// A CPU copy of a tensor whose memory the host cannot read, for `what`.
Tensor readable_copy(const Tensor& t) {
  g_host_read_copies.fetch_add(1, std::memory_order_relaxed);
  NoGradGuard no_grad;
  return t.to(cpu_device());
}

}  // namespace detail

void* Tensor::raw_data() const {
  detail::observe_read(*this, "reading its data");
  // One check for every host read of a tensor's memory: a device's memory
  // is the device's to touch (its kernels take detail::device_address).
  KILN_CHECK(device().type == DeviceType::CPU || detail::host_readable(device()), "reading the memory of a ", meta_str(),
             " tensor on ", device().str(),
             " from the host (raw_data(), data<T>(), a NumPy or DLPack view): the host cannot read that device's memory; ",
             in_caller_language("copy it first with .to(kiln::cpu_device())", "copy it first with .to('cpu') (or .asnumpy())"));
  return detail::device_address(*this);
}

void* Tensor::device_data() const { return detail::device_address(*this); }

std::string Tensor::meta_str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape());
}

namespace {
template <typename T>
double element_as_double(const Tensor& t, int64_t linear) {
  // Logical index -> storage address through the strides.
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t size = t.shape()[d];
    off += (linear % size) * t.strides()[d];
    linear /= size;
  }
  const T* base = static_cast<const T*>(t.raw_data());
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(base[off]));
  } else {
    return static_cast<double>(base[off]);
  }
}
}  // namespace

template <typename T>
T Tensor::item() const {
  detail::observe_read(*this, "item()");
  KILN_CHECK(numel() == 1, "item() needs a one-element tensor, but this one is ", meta_str(),
             "; index or reduce it first");
  if (!detail::host_readable(device())) return detail::readable_copy(*this).item<T>();
  double v = 0;
  KILN_DISPATCH_ALL(dtype(), v = element_as_double<scalar_t>(*this, 0));
  return static_cast<T>(v);
}

namespace {
template <typename To, typename From>
To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, Half> || std::is_same_v<From, BFloat16>) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Every element in row-major order, converted to T, without calling an op.
template <typename T, typename S>
void gather_converted(const Tensor& t, std::vector<T>& out) {
  const S* base = static_cast<const S*>(t.raw_data());
  const int64_t n = t.numel(), rank = t.dim();
  if (n == 0) return;
  if (t.is_contiguous()) {
    for (int64_t i = 0; i < n; ++i) out[i] = convert<T>(base[i]);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = convert<T>(base[offset]);
    for (int64_t d = rank - 1; d >= 0; --d) {  // odometer step
      offset += t.strides()[d];
      if (++index[d] < t.shape()[d]) break;
      offset -= index[d] * t.strides()[d];
      index[d] = 0;
    }
  }
}
}  // namespace

template <typename T>
std::vector<T> Tensor::to_vector() const {
  detail::observe_read(*this, "to_vector()");
  if (!detail::host_readable(device())) return detail::readable_copy(*this).to_vector<T>();
  std::vector<T> out(static_cast<size_t>(numel()));
  KILN_DISPATCH_ALL(dtype(), gather_converted<T, scalar_t>(*this, out));
  return out;
}

#define KILN_INSTANTIATE_ACCESS(T)            \
  template T Tensor::item<T>() const;         \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE_ACCESS(float)
KILN_INSTANTIATE_ACCESS(double)
KILN_INSTANTIATE_ACCESS(int32_t)
KILN_INSTANTIATE_ACCESS(int64_t)
KILN_INSTANTIATE_ACCESS(uint8_t)
KILN_INSTANTIATE_ACCESS(int8_t)
KILN_INSTANTIATE_ACCESS(bool)
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

Tensor& Tensor::set_requires_grad(bool on) {
  KILN_CHECK(!on || is_floating(dtype()), "requires_grad needs a floating-point tensor, but this one is ",
             meta_str(), "; convert it with .to(kiln::DType::Float32)");
  KILN_CHECK(is_leaf() || on, "set_requires_grad(false) on a non-leaf tensor; use detach() instead");
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->shape = shape();
  impl2->strides = strides();
  impl2->offset = offset();
  impl2->dtype = dtype();
  return Tensor(std::move(impl2));
}

}  // namespace kiln

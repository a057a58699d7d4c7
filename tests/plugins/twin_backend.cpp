// A backend library for the tests: the device kind "twin", whose memory is
// host blocks the host is told it cannot read (so every host read must take
// the checked path), with kernels for add and relu only. It counts its kernel
// calls and copies, which the test reads through twin_counters().
// BAD_BACKEND builds variants that must be refused, and (3) a stand-in for
// the CUDA backend's library.
#include <atomic>
#include <cstring>
#include <vector>

#include "kiln/backend_library.h"

namespace {

std::atomic<int64_t> kernel_calls{0}, copies{0};

class TwinBackend : public kiln::Backend {
 public:
  kiln::Allocator& allocator(int) override { return kiln::host_allocator(); }
  bool host_memory() const override { return false; }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    ++copies;
    std::memcpy(dst, src, n);
  }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    ++copies;
    std::memcpy(dst, src, n);
  }
};

// Element i of a tensor of `out_shape` read from `t` (broadcast from the right, any strides).
float element(const kiln::Tensor& t, const kiln::Shape& out_shape, int64_t i) {
  const auto* base = static_cast<const float*>(t.device_data());
  int64_t off = 0;
  const size_t skip = out_shape.size() - t.shape().size();
  for (size_t d = out_shape.size(); d-- > 0;) {
    const int64_t at = i % out_shape[d];
    i /= out_shape[d];
    if (d >= skip && t.shape()[d - skip] != 1) off += at * t.strides()[d - skip];
  }
  return base[off];
}

void twin_add(const std::vector<kiln::Tensor>& in, std::vector<kiln::Tensor>& out, const kiln::Attrs&) {
  ++kernel_calls;
  auto* y = static_cast<float*>(out[0].device_data());
  for (int64_t i = 0; i < out[0].numel(); ++i) y[i] = element(in[0], out[0].shape(), i) + element(in[1], out[0].shape(), i);
}

[[maybe_unused]] void twin_relu(const std::vector<kiln::Tensor>& in, std::vector<kiln::Tensor>& out, const kiln::Attrs&) {
  ++kernel_calls;
  auto* y = static_cast<float*>(out[0].device_data());
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    const float v = element(in[0], out[0].shape(), i);
    y[i] = v > 0 ? v : 0;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void twin_counters(int64_t* kernels, int64_t* copy_count) {
  *kernels = kernel_calls.load();
  *copy_count = copies.load();
}

#if !defined(BAD_BACKEND)
KILN_BACKEND_LIBRARY(twin, reg) {
  static TwinBackend backend;
  reg.backend(backend);
  reg.kernel("add", {kiln::DType::Float32}, twin_add);
  reg.kernel("relu", {kiln::DType::Float32}, twin_relu);
}
#elif BAD_BACKEND == 3  // not a fault: a stand-in for the CUDA backend, found where libkiln_cuda.so would be
KILN_BACKEND_LIBRARY(cuda, reg) {
  static TwinBackend backend;
  reg.backend(backend);
  reg.kernel("add", {kiln::DType::Float32}, twin_add);
  reg.kernel("relu", {kiln::DType::Float32}, twin_relu);
}
#elif BAD_BACKEND == 1  // a kernel for an op nobody defines
KILN_BACKEND_LIBRARY(twin_bad, reg) {
  static TwinBackend backend;
  reg.backend(backend);
  reg.kernel("add", {kiln::DType::Float32}, twin_add);
  reg.kernel("no_such_op", {kiln::DType::Float32}, twin_relu);
}
#elif BAD_BACKEND == 2  // no backend at all
KILN_BACKEND_LIBRARY(twin_empty, reg) { reg.kernel("add", {kiln::DType::Float32}, twin_add); }
#endif

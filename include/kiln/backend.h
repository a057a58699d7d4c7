#pragma once
// What a backend gives the layers above its kernels: memory on its devices,
// copies between that memory and the host, creation in it, and the loop
// that runs a compiled graph. Its kernels register in the op registry per
// (op, backend, dtype), each with what it accepts; an op without one there,
// or a call its kernel does not accept, runs on the CPU instead, visibly
// (see kiln/registry.h: Kernel, set_strict_device).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/allocator.h"
#include "kiln/attrs.h"
#include "kiln/device.h"
#include "kiln/dtype.h"

namespace kiln {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator(int index) = 0;
  // Memory the CPU can read and write directly (the CPU and the reference
  // backend): views and copies need no transfer.
  virtual bool host_memory() const = 0;
  // src on this backend's device `index`, dst in host memory, and back.
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes, int index) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes, int index) = 0;
  // Waits for the work queued on device `index` (nothing to wait for on the host).
  virtual void synchronize(int index) {}

  // Creation on the device: element i of `count` elements of `dtype` at dst
  // becomes start + i * step (step 0: a constant), or number i of the
  // counter-based draw (seed, first counter) of the given kind (kiln/generator.h:
  // the same numbers on every backend). Here staged through host memory and
  // copied; a device backend computes them where they are.
  enum class Random { Uniform, Normal };
  virtual void fill_affine(void* dst, size_t count, DType dtype, double start, double step, int index);
  virtual void fill_random(void* dst, size_t count, DType dtype, Random kind, uint64_t seed, uint64_t first, int index);

  // Runs a compiled graph's `count` steps on device `index` in order;
  // `step(i)` launches step i. Host backends call them one after another on
  // the caller's thread; a device backend queues them on its stream. The
  // executor calls synchronize(index) before it hands the outputs back.
  virtual void run_steps(int index, size_t count, const std::function<void(size_t)>& step) {
    for (size_t i = 0; i < count; ++i) step(i);
  }
};

// A backend whose tensors live in host memory (the CPU's, the reference
// backend): the host allocator, and copies that are memcpy.
class HostMemoryBackend : public Backend {
 public:
  Allocator& allocator(int) override { return host_allocator(); }
  bool host_memory() const override { return true; }
  void copy_to_host(void* dst, const void* src, size_t nbytes, int) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes, int) override;
  void fill_affine(void* dst, size_t count, DType dtype, double start, double step, int) override;
  void fill_random(void* dst, size_t count, DType dtype, Random kind, uint64_t seed, uint64_t first, int) override;
};

namespace detail {
// The host's loops behind fill_affine and fill_random, for any backend
// whose memory the host reaches (the CPU's, or the reference backend's
// after decoding its handles).
void host_fill_affine(void* dst, size_t count, DType dtype, double start, double step);
void host_fill_random(void* dst, size_t count, DType dtype, Backend::Random kind, uint64_t seed, uint64_t first);
}  // namespace detail

// Backends register themselves when their library loads; the CPU is always there.
void register_backend(DeviceType type, Backend* backend);
Backend* find_backend(DeviceType type);  // nullptr when this build has none
Backend& backend(DeviceType type);       // throws naming the backends there are

// Copies nbytes of contiguous memory from one device to another.
void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes);

}  // namespace kiln

#pragma once
// What a backend gives the layers above its kernels: memory on its devices
// and copies between that memory and the host. Its kernels register in the
// op registry per (op, backend, dtype); an op without one there runs on the
// CPU instead, visibly (see kiln/registry.h: set_strict_device).
#include <cstddef>

#include "kiln/allocator.h"
#include "kiln/device.h"

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
};

// A backend whose tensors live in host memory (the CPU's, the reference
// backend): the host allocator, and copies that are memcpy.
class HostMemoryBackend : public Backend {
 public:
  Allocator& allocator(int) override { return host_allocator(); }
  bool host_memory() const override { return true; }
  void copy_to_host(void* dst, const void* src, size_t nbytes, int) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes, int) override;
};

// Backends register themselves when their library loads; the CPU is always there.
void register_backend(DeviceType type, Backend* backend);
Backend* find_backend(DeviceType type);  // nullptr when this build has none
Backend& backend(DeviceType type);       // throws naming the backends there are

// Copies nbytes of contiguous memory from one device to another.
void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes);

}  // namespace kiln

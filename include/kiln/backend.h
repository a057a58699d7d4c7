#pragma once
// What a backend gives the layers above its kernels: memory on its devices,
// copies between that memory and the host, which calls its kernels take,
// and the loop that runs a compiled graph. Its kernels register in the op
// registry per (op, backend, dtype); an op without one there, or a call its
// kernel does not take, runs on the CPU instead, visibly (see
// kiln/registry.h: set_strict_device).
#include <cstddef>
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

  // Whether this backend's kernel for `op` (registered for the dispatch
  // dtype) takes this call: a kernel may cover only some of an op's calls (a
  // library's algorithms, a loop written for one case). `dtypes` are the
  // inputs' (an omitted optional input is absent). False, with the reason in
  // `why`, runs the call on the CPU instead, visibly, as for a missing kernel.
  virtual bool supports(const std::string& op, const std::vector<DType>& dtypes, const Attrs& attrs,
                        std::string* why) const {
    return true;
  }
  // The calls of `op` its kernel does not take, for the op table ("groups
  // other than 1"); empty where it takes them all.
  virtual std::string unsupported_calls(const std::string& op) const { return {}; }

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
};

// Backends register themselves when their library loads; the CPU is always there.
void register_backend(DeviceType type, Backend* backend);
Backend* find_backend(DeviceType type);  // nullptr when this build has none
Backend& backend(DeviceType type);       // throws naming the backends there are

// Copies nbytes of contiguous memory from one device to another.
void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes);

}  // namespace kiln

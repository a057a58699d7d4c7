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
#include <memory>
#include <string>
#include <vector>

#include "kiln/allocator.h"
#include "kiln/attrs.h"
#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/stream.h"

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

  // Streams and events (kiln/stream.h). The stream a thread's kernels on
  // device `index` go to; an event at the end of what a stream holds now;
  // a stream waiting for an event before its later work; the host waiting
  // for one; the seconds between two events of one stream. On the host
  // backends work runs as issued: events are times, and waits return at once.
  virtual Stream current_stream(int index) { return {Device{type_of_backend(), index}, nullptr}; }
  virtual Event record(const Stream& stream);
  virtual void wait(const Stream& stream, const Event& event) {}
  virtual void synchronize(const Event& event) {}
  virtual double elapsed_seconds(const Event& from, const Event& to);

  // Copies in stream order, which a device overlaps with its kernels where
  // the host side is pinned memory; here they are the synchronous copies.
  virtual void copy_to_host_async(void* dst, const void* src, size_t nbytes, const Stream& stream) {
    copy_to_host(dst, src, nbytes, stream.device.index);
  }
  virtual void copy_from_host_async(void* dst, const void* src, size_t nbytes, const Stream& stream) {
    copy_from_host(dst, src, nbytes, stream.device.index);
  }
  // Within device `index`, without the host (here through it).
  virtual void copy_on_device(void* dst, const void* src, size_t nbytes, int index);
  // From device `src_index` to device `dst_index` of this backend (a GPU's
  // peer copy; here through the host).
  virtual void copy_across(void* dst, int dst_index, const void* src, int src_index, size_t nbytes);
  // Host memory the device copies to and from fastest (page-locked for a
  // GPU); on the host backends, the host's allocator.
  virtual Allocator& pinned_allocator() { return host_allocator(); }
  // Which DeviceType this backend serves (set by register_backend).
  DeviceType type_of_backend() const { return type_; }

  // Creation on the device: element i of `count` elements of `dtype`, at
  // dst + i * stride elements (the others untouched), becomes start + i * step
  // (step 0: a constant), or number i of the counter-based draw `draw`
  // (kiln/generator.h: the same numbers on every backend). Here staged
  // through host memory and copied; a device backend computes them where they are.
  enum class Random { Uniform, Normal, Integers };
  struct Draw {
    Random kind = Random::Uniform;
    uint64_t seed = 0, first = 0;  // the generator's seed and the draw's first counter
    int64_t low = 0, high = 0;     // Integers: in [low, high)
  };
  virtual void fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step, int index);
  virtual void fill_random(void* dst, size_t count, DType dtype, const Draw& draw, int index);

  // Runs a compiled graph's `count` steps on device `index` in order;
  // `step(i)` launches step i. Host backends call them one after another on
  // the caller's thread; a device backend queues them on its stream. The
  // executor calls synchronize(index) before it hands the outputs back.
  virtual void run_steps(int index, size_t count, const std::function<void(size_t)>& step) {
    for (size_t i = 0; i < count; ++i) step(i);
  }
  // Runs the steps as run_steps does while recording the work they queue,
  // so that replay() queues it all again at once (a CUDA graph), with the
  // same addresses and sizes; nullptr, with why in *why, where this backend
  // records nothing or a step did what a recording cannot hold (then the
  // steps' work is undone or unqueued: the caller runs them again). The
  // executor records a compiled graph's run once it has run plainly (the
  // kernels' first-call work done) and replays it from then on.
  class Recording {
   public:
    virtual ~Recording() = default;
    virtual void replay() = 0;
    // Device memory kept for recordings when this one was made (scratch a
    // replay writes, which no allocator hands out again).
    virtual int64_t kept_bytes() const { return 0; }
  };
  virtual std::unique_ptr<Recording> record_steps(int index, size_t count, const std::function<void(size_t)>& step,
                                                  std::string* why) {
    *why = std::string(device_type_name(type_)) + " runs work as it is issued, with nothing to record";
    return nullptr;
  }

 private:
  friend void register_backend(DeviceType type, Backend* backend);
  DeviceType type_ = DeviceType::CPU;
};

// Where a kernel runs, given to it by the dispatcher and the graph executor:
// its device, the stream its work goes to, the allocator for its scratch
// memory (the device's, stream-ordered: allocate_on(stream, n)), and whether
// the profiler wants device time (then a device backend records events
// around its work: Backend::record and elapsed_seconds).
struct KernelContext {
  Device device;
  Stream stream;
  Allocator* workspace = nullptr;
  bool timed = false;
};
// The running kernel's context; outside a kernel, an error.
KernelContext kernel_context();

// The counters of a random op's draw of n numbers, as Generator::take gives
// them: number i is philox's (seed, first, i). Outside a recording they are
// taken from the default generator now. While a compiled graph's steps are
// recorded to be replayed (a CUDA graph), each replay must draw new numbers
// without host code: the kernel then reads the seed and a base counter from
// `state` (two uint64 at that device address, which the graph's executor
// writes before each run) and adds `relative` to the base. A random kernel
// on a backend that records draws through this, never the generator.
struct RandomDraw {
  uint64_t seed = 0, first = 0;
  const void* state = nullptr;
  uint64_t relative = 0;
};
RandomDraw take_random(uint64_t n);

namespace detail {
// Where take_random points kernels while an executor records its steps
// (record_steps runs them on the recording thread, which these are set on):
// the device address of its {seed, base} and the counters taken so far.
struct RecordedDraws {
  const void* state = nullptr;
  uint64_t taken = 0;
};
// Installs draws for this thread (null: none); returns the ones before.
RecordedDraws* set_recorded_draws(RecordedDraws* draws);
}  // namespace detail

// A backend whose tensors live in host memory (the CPU's, the reference
// backend): the host allocator, and copies that are memcpy.
class HostMemoryBackend : public Backend {
 public:
  Allocator& allocator(int) override { return host_allocator(); }
  bool host_memory() const override { return true; }
  void copy_to_host(void* dst, const void* src, size_t nbytes, int) override;
  void copy_from_host(void* dst, const void* src, size_t nbytes, int) override;
  void fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step, int) override;
  void fill_random(void* dst, size_t count, DType dtype, const Draw& draw, int) override;
};

namespace detail {
// The host's loops behind fill_affine and fill_random, for any backend
// whose memory the host reaches (the CPU's, or the reference backend's
// after decoding its handles).
void host_fill_affine(void* dst, size_t count, int64_t stride, DType dtype, double start, double step);
void host_fill_random(void* dst, size_t count, DType dtype, const Backend::Draw& draw);
// Why `type` has no backend here: the ones there are, how to get CUDA's, or
// why its library did not load.
std::string no_backend_message(DeviceType type);
// Loads the backend library of a device kind Kiln names but has no backend
// for, where one is installed (the op layer's: libkiln_<kind>.so beside
// libkiln.so), writing why one that is there did not load into *why; false
// when it cannot try now (inside another library's load), so that a later
// call does. find_backend calls it when that kind is first asked for.
using BackendLoader = bool (*)(DeviceType type, std::string* why);
void set_backend_loader(BackendLoader loader);
}  // namespace detail

// Backends register themselves when their library loads; the CPU is always there.
void register_backend(DeviceType type, Backend* backend);
// nullptr when this build has none (after trying, once, the kind's backend
// library beside libkiln: detail::set_backend_loader).
Backend* find_backend(DeviceType type);
Backend& backend(DeviceType type);       // throws naming the backends there are

// Copies nbytes of contiguous memory from one device to another.
void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes);
// The same in `stream`'s order (the device side's stream): the caller keeps
// both buffers alive and unchanged until the stream has passed the copy.
void copy_between_async(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes,
                        const Stream& stream);

}  // namespace kiln

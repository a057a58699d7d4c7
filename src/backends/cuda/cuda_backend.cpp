// The CUDA backend, a backend library (libkiln_cuda.so, built with
// -DKILN_CUDA=on; load it with load_op_library or KILN_PLUGIN_PATH):
// each GPU's memory through the stream-ordered caching allocator, pinned
// host memory for staging, copies in stream order, streams and events; and
// its kernels: elementwise_ops.cpp (every op with an elementwise formula, and
// copy), arithmetic_ops.cpp (the elementwise ops on integers, and mod),
// convert_ops.cpp and join_ops.cpp (casts, comparisons, where, concat, pad
// and the other ops of every dtype), reduce_ops.cpp (the
// reductions), index_ops.cpp (gather, index_select, scatter_add, one_hot),
// resize_ops.cpp (interpolate), matmul_kernels.cpp (matmul, linear and
// attention on cuBLASLt), training_ops.cpp (softmax, the norms, dropout,
// embedding), loss_ops.cpp, optimizer_ops.cpp, pool_ops.cpp and
// conv_kernels.cpp (convolutions on cuDNN where it is installed). Every
// other op on a CUDA tensor runs on the CPU, visibly (a warning, the
// profile's fallback column, an error in strict mode), with its transfers.
//
// Work goes to each device's default stream, so the synchronous copies are
// ordered after every kernel queued before them; an index a kernel found out
// of range is raised there (index_errors.h). A compiled graph's run is
// recorded as a CUDA graph and replayed (graph_recording.cpp): while a thread
// records, its kernels queue on the capture stream and take memory from the
// recordings' pool.
#include <cuda_runtime.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cuda/conv_kernels.h"
#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/elementwise_kernels.h"
#include "backends/cuda/graph_recording.h"
#include "backends/cuda/index_errors.h"
#include "backends/cuda/matmul_kernels.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/training_kernels.h"
#include "core/stream_ordered_allocator.h"
#include "kiln/backend_library.h"
#include "kiln/error.h"

namespace {
using kiln::DeviceType;
using kiln::cuda::check;
using kiln::cuda::OnDevice;

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // (no driver or no device: not an error until a CUDA device is asked for)
    return 0;
  }
  return n;
}

// A GPU's memory: the caching allocator tensors get their blocks from, its
// statistics with the recordings' pool beside it (CUDA graphs' scratch,
// graph_recording.cpp), which allocator_stats then counts too.
class DeviceMemory final : public kiln::Allocator {
 public:
  DeviceMemory(int index, kiln::DeviceMemoryCalls calls)
      : index_(index), memory_(std::make_unique<kiln::StreamOrderedAllocator>(std::move(calls))) {}
  void* allocate(size_t nbytes) override { return memory_->allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes) override { memory_->deallocate(ptr, nbytes); }
  void* allocate_on(const kiln::Stream& stream, size_t nbytes) override { return memory_->allocate_on(stream, nbytes); }
  void deallocate_on(const kiln::Stream& stream, void* ptr, size_t nbytes) override {
    memory_->deallocate_on(stream, ptr, nbytes);
  }
  // (The peaks add up to at most the two's sum at one time.)
  kiln::AllocatorStats stats() const override {
    kiln::AllocatorStats s = memory_->stats();
    const kiln::AllocatorStats r = kiln::cuda::recording_memory_stats(index_);
    s.bytes_in_use += r.bytes_in_use;
    s.bytes_cached += r.bytes_cached;
    s.peak_bytes_in_use += r.peak_bytes_in_use;
    s.system_allocations += r.system_allocations;
    s.reuses += r.reuses;
    return s;
  }

 private:
  int index_;
  std::unique_ptr<kiln::StreamOrderedAllocator> memory_;
};

class CudaBackend final : public kiln::Backend {
 public:
  CudaBackend() : count_(device_count()), devices_(static_cast<size_t>(count_)) {}

  // (While this thread records a CUDA graph: the recordings' pool.)
  kiln::Allocator& allocator(int index) override {
    if (const auto* r = kiln::cuda::recorder_of_this_thread(index)) return *r->pool;
    return *device(index).memory;
  }
  bool host_memory() const override { return false; }

  void copy_to_host(void* dst, const void* src, size_t nbytes, int index) override {
    OnDevice on(checked(index));
    check(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToHost), "a copy to the host");
    kiln::cuda::raise_index_error(index);
  }
  void copy_from_host(void* dst, const void* src, size_t nbytes, int index) override {
    OnDevice on(checked(index));
    check(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToDevice), "a copy from the host");
  }
  void synchronize(int index) override {
    OnDevice on(checked(index));
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    kiln::cuda::raise_index_error(index);
  }

  // The legacy default stream, or the capture stream while this thread records.
  kiln::Stream current_stream(int index) override {
    const auto* r = kiln::cuda::recorder_of_this_thread(index);
    return {kiln::Device{DeviceType::CUDA, checked(index)}, r ? r->stream : nullptr};
  }
  std::unique_ptr<Recording> record_steps(int index, size_t count, const std::function<void(size_t)>& step,
                                          std::string* why) override {
    return kiln::cuda::record_steps(checked(index), count, step, why);
  }
  // Events come from a ring per device, created once: an event stays valid
  // until kEvents more are recorded on its device.
  kiln::Event record(const kiln::Stream& stream) override {
    Device& d = device(stream.device.index);
    OnDevice on(stream.device.index);
    cudaEvent_t event;
    {
      std::lock_guard<std::mutex> lock(d.mu);
      if (d.events.empty()) {
        d.events.resize(kEvents);
        for (auto& e : d.events) check(cudaEventCreate(&e), "cudaEventCreate");
      }
      event = d.events[d.next_event++ % kEvents];
    }
    check(cudaEventRecord(event, static_cast<cudaStream_t>(stream.handle)), "cudaEventRecord");
    return {stream.device, event, 0};
  }
  void wait(const kiln::Stream& stream, const kiln::Event& event) override {
    OnDevice on(checked(stream.device.index));
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle), static_cast<cudaEvent_t>(event.handle), 0),
          "cudaStreamWaitEvent");
  }
  void synchronize(const kiln::Event& event) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(event.handle)), "cudaEventSynchronize");
    kiln::cuda::raise_index_error(event.device.index);
  }
  double elapsed_seconds(const kiln::Event& from, const kiln::Event& to) override {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from.handle), static_cast<cudaEvent_t>(to.handle)),
          "cudaEventElapsedTime");
    return ms / 1000.0;
  }

  void copy_to_host_async(void* dst, const void* src, size_t nbytes, const kiln::Stream& stream) override {
    OnDevice on(checked(stream.device.index));
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream.handle)),
          "an asynchronous copy to the host");
  }
  void copy_from_host_async(void* dst, const void* src, size_t nbytes, const kiln::Stream& stream) override {
    OnDevice on(checked(stream.device.index));
    check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream.handle)),
          "an asynchronous copy from the host");
  }
  void copy_on_device(void* dst, const void* src, size_t nbytes, int index) override {
    OnDevice on(checked(index));
    check(cudaMemcpy(dst, src, nbytes, cudaMemcpyDeviceToDevice), "a copy on the device");
  }
  void copy_across(void* dst, int dst_index, const void* src, int src_index, size_t nbytes) override {
    check(cudaMemcpyPeer(dst, checked(dst_index), src, checked(src_index), nbytes), "a copy between devices");
  }

  // Page-locked host memory, cached as the devices' is (its blocks may be
  // read by copies still queued when freed).
  kiln::Allocator& pinned_allocator() override {
    std::call_once(pinned_once_, [this] {
      kiln::DeviceMemoryCalls calls;
      calls.device = "pinned host memory";
      calls.allocate = [](size_t n) -> void* {
        void* p = nullptr;
        if (cudaHostAlloc(&p, n, cudaHostAllocDefault) != cudaSuccess) {
          cudaGetLastError();
          return nullptr;
        }
        return p;
      };
      calls.free = [](void* p) { cudaFreeHost(p); };
      calls.synchronize = [this] {
        for (int i = 0; i < count_; ++i) synchronize(i);
      };
      pinned_ = std::make_unique<kiln::StreamOrderedAllocator>(std::move(calls));
    });
    return *pinned_;
  }

 private:
  static constexpr size_t kEvents = 4096;

  struct Device {
    std::once_flag made;
    std::unique_ptr<DeviceMemory> memory;
    std::mutex mu;
    std::vector<cudaEvent_t> events;
    size_t next_event = 0;
  };

  int checked(int index) const {
    if (index >= 0 && index < count_) return index;
    if (count_ == 0)
      KILN_FAIL("cuda:", index,
                ": this machine has no CUDA device that this process can use (cudaGetDeviceCount: 0); "
                "run on device cpu, or check the driver with nvidia-smi");
    KILN_FAIL("cuda:", index, ": this machine has ", count_, " CUDA device", count_ == 1 ? "" : "s", " (cuda:0",
              count_ > 1 ? " to cuda:" + std::to_string(count_ - 1) : std::string(), ")");
  }

  Device& device(int index) {
    Device& d = devices_[static_cast<size_t>(checked(index))];
    std::call_once(d.made, [this, index, &d] {
      kiln::DeviceMemoryCalls calls;
      calls.device = "cuda:" + std::to_string(index);
      calls.allocate = [index](size_t n) -> void* {
        OnDevice on(index);
        void* p = nullptr;
        if (cudaMalloc(&p, n) != cudaSuccess) {
          cudaGetLastError();  // (an out-of-memory status is not sticky: clear it)
          return nullptr;
        }
        return p;
      };
      calls.free = [index](void* p) {
        OnDevice on(index);
        cudaFree(p);
      };
      calls.synchronize = [this, index] { synchronize(index); };
      calls.current_stream = [] { return static_cast<void*>(nullptr); };
      calls.free_and_total = [index] {
        OnDevice on(index);
        size_t free = 0, total = 0;
        cudaMemGetInfo(&free, &total);
        return std::pair<size_t, size_t>{free, total};
      };
      d.memory = std::make_unique<DeviceMemory>(index, std::move(calls));
    });
    return d;
  }

  int count_;
  std::vector<Device> devices_;
  std::once_flag pinned_once_;
  std::unique_ptr<kiln::StreamOrderedAllocator> pinned_;
};

}  // namespace

KILN_BACKEND_LIBRARY(cuda, reg) {
  static CudaBackend backend;
  reg.backend(backend);
  kiln::cuda::register_elementwise_kernels(reg);
  kiln::cuda::register_matmul_kernels(reg);
  kiln::cuda::register_training_kernels(reg);
  kiln::cuda::register_reduce_kernels(reg);
  kiln::cuda::register_loss_kernels(reg);
  kiln::cuda::register_optimizer_kernels(reg);
  kiln::cuda::register_pool_kernels(reg);
  kiln::cuda::register_collective_kernels(reg);
  kiln::cuda::register_conv_kernels(reg);
  kiln::cuda::register_convert_kernels(reg);
  kiln::cuda::register_join_kernels(reg);
  kiln::cuda::register_index_kernels(reg);
  kiln::cuda::register_resize_kernels(reg);
  kiln::cuda::register_arithmetic_kernels(reg);
}

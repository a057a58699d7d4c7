// CUDA graphs of compiled graphs' runs, captured on a non-blocking stream in
// thread-local mode: another thread's work on the default stream does not
// touch the capture, and a call of this thread that would act outside the
// graph (a synchronous copy, cudaMalloc, a device-wide wait) fails and ends
// the capture, so the run goes on unrecorded rather than replay something
// else. Captures on one device take turns. A replay is ordered after the
// default stream's work (the inputs just copied) and before its later work
// by events, as the legacy stream is not ordered with this one.
#include "backends/cuda/graph_recording.h"

#include <atomic>
#include <mutex>
#include <vector>

#include "backends/cuda/on_device.h"
#include "core/stream_ordered_allocator.h"

namespace kiln::cuda {
namespace {

thread_local Recorder t_recorder;
thread_local bool t_recording = false;

// Per device: the capture stream and the recordings' memory pool, made at
// the first recording and kept for the process.
struct Recordings {
  std::once_flag made;
  std::mutex capturing;  // one capture at a time on the stream
  cudaStream_t stream = nullptr;
  std::unique_ptr<StreamOrderedAllocator> pool;
  std::atomic<bool> ready{false};  // made (read without the once flag by recording_memory_stats)
};

std::vector<Recordings>& all_recordings();

Recordings& recordings_of(int device) {
  std::vector<Recordings>& all = all_recordings();
  KILN_CHECK(device >= 0 && device < static_cast<int>(all.size()), "cuda:", device, ": no such device");
  Recordings& r = all[static_cast<size_t>(device)];
  std::call_once(r.made, [&r, device] {
    OnDevice on(device);
    check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "creating the stream CUDA graphs run on");
    DeviceMemoryCalls calls;
    calls.device = "cuda:" + std::to_string(device) + " (CUDA graphs' memory)";
    calls.allocate = [device](size_t n) -> void* {  // (during a capture: allowed for this call alone)
      OnDevice on(device);
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      cudaThreadExchangeStreamCaptureMode(&mode);
      void* p = nullptr;
      const cudaError_t got = cudaMalloc(&p, n);
      cudaThreadExchangeStreamCaptureMode(&mode);
      if (got != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
      }
      return p;
    };
    // Never given back: a recorded graph keeps writing the addresses it got.
    calls.free = [](void*) {};
    calls.synchronize = [] {};
    calls.current_stream = [stream = r.stream] { return static_cast<void*>(stream); };
    r.pool = std::make_unique<StreamOrderedAllocator>(std::move(calls));
    r.ready.store(true, std::memory_order_release);
  });
  return r;
}

std::vector<Recordings>& all_recordings() {
  static std::vector<Recordings> all(64);
  return all;
}

class CudaGraph final : public Backend::Recording {
 public:
  CudaGraph(int device, cudaStream_t stream, cudaGraphExec_t exec, int64_t kept)
      : device_(device), stream_(stream), exec_(exec), kept_(kept) {
    check(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming), "cudaEventCreate");
  }
  ~CudaGraph() override {
    const int before = current_device();
    cudaSetDevice(device_);
    cudaGraphExecDestroy(exec_);
    cudaEventDestroy(before_);
    cudaEventDestroy(after_);
    cudaSetDevice(before);
  }
  void replay() override {
    OnDevice on(device_);
    check(cudaEventRecord(before_, nullptr), "ordering a CUDA graph after the default stream");
    check(cudaStreamWaitEvent(stream_, before_, 0), "ordering a CUDA graph after the default stream");
    check(cudaGraphLaunch(exec_, stream_), "launching a CUDA graph");
    check(cudaEventRecord(after_, stream_), "ordering the default stream after a CUDA graph");
    check(cudaStreamWaitEvent(nullptr, after_, 0), "ordering the default stream after a CUDA graph");
  }
  int64_t kept_bytes() const override { return kept_; }

 private:
  static int current_device() {
    int d = 0;
    cudaGetDevice(&d);
    return d;
  }
  int device_;
  cudaStream_t stream_;
  cudaGraphExec_t exec_;
  cudaEvent_t before_ = nullptr, after_ = nullptr;
  int64_t kept_;
};

// Ends a capture that failed, dropping what it held.
void abandon(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial) cudaGraphDestroy(partial);
  cudaGetLastError();  // (capture errors are not sticky)
}

}  // namespace

AllocatorStats recording_memory_stats(int device) {
  std::vector<Recordings>& all = all_recordings();
  if (device < 0 || device >= static_cast<int>(all.size())) return {};
  const Recordings& r = all[static_cast<size_t>(device)];
  return r.ready.load(std::memory_order_acquire) ? r.pool->stats() : AllocatorStats{};
}

const Recorder* recorder_of_this_thread(int device) {
  return t_recording && t_recorder.device == device ? &t_recorder : nullptr;
}

std::unique_ptr<Backend::Recording> record_steps(int device, size_t count, const std::function<void(size_t)>& step,
                                                 std::string* why) {
  Recordings& r = recordings_of(device);
  const std::lock_guard<std::mutex> one_at_a_time(r.capturing);
  OnDevice on(device);
  check(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal), "beginning a CUDA graph capture");
  t_recorder = {device, r.stream, r.pool.get()};
  t_recording = true;
  try {
    for (size_t i = 0; i < count; ++i) step(i);
  } catch (const std::exception& e) {
    t_recording = false;
    abandon(r.stream);
    *why = std::string("a step could not be captured (") + e.what() + ")";
    return nullptr;
  }
  t_recording = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(r.stream, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    abandon(r.stream);
    *why = std::string("the capture was invalidated (") + cudaGetErrorString(ended) +
           "): a step synchronized with the host or the default stream";
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    cudaGetLastError();
    *why = std::string("the captured graph did not instantiate (") + cudaGetErrorString(made) + ")";
    return nullptr;
  }
  const AllocatorStats pool = r.pool->stats();
  auto recording = std::make_unique<CudaGraph>(device, r.stream, exec, pool.bytes_in_use + pool.bytes_cached);
  recording->replay();  // what was captured has not run yet
  return recording;
}

}  // namespace kiln::cuda

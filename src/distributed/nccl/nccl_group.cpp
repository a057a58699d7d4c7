// Process groups over NCCL: collectives on the CUDA tensors of the rank's
// GPU, queued on a communication stream of the group's own that first waits
// for what the caller's stream has queued, so that they overlap with the
// caller's later kernels (backward, under data parallelism). Waiting for one
// makes the caller's stream wait for it, not the host. The ranks join, trade
// NCCL's id and move CPU tensors over a Gloo group of the same ranks.
//
// A collective a rank never joins would keep the others' kernels spinning:
// a watchdog aborts the communicator once the oldest collective has waited
// past the group's timeout, says so on stderr, and every later call of the
// group throws that message.
#include <nccl.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include "backends/cuda/on_device.h"
#include "kiln/backend.h"
#include "kiln/dist.h"
#include "kiln/error.h"

namespace kiln::dist {

namespace {

using cuda::check;  // the CUDA backend's: a failed call's name and CUDA's reason
using cuda::OnDevice;

void check_nccl(ncclResult_t status, const char* what, ncclComm_t comm = nullptr) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  const char* last = ncclGetLastError(comm);
  KILN_FAIL("dist (nccl): ", what, " failed: ", ncclGetErrorString(status),
            last && *last ? std::string(" (") + last + ")" : "", "; NCCL_DEBUG=WARN prints NCCL's own account");
}

ncclDataType_t nccl_type(DType dtype, const char* what) {
  switch (dtype) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::UInt8:
      return ncclUint8;
    case DType::Int8:
      return ncclInt8;
    case DType::Bool:
      break;
  }
  KILN_FAIL("dist: ", what, " cannot reduce bool tensors; cast to uint8 (Max is 'any', Min is 'all') first");
}

ncclRedOp_t nccl_op(ReduceOp op, DType dtype, const char* what) {
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Mean:
      break;
  }
  KILN_CHECK(is_floating(dtype), "dist: ", what, " with Mean takes a floating tensor, got ", dtype_name(dtype),
             "; reduce with Sum and divide, or cast first");
  return ncclAvg;
}

// The stream the caller's kernels on `device` go to.
cudaStream_t compute_stream(int device) {
  return static_cast<cudaStream_t>(backend(DeviceType::CUDA).current_stream(device).handle);
}

// One collective in flight: its events on the communication stream and the
// tensors it reads and writes, kept alive (their memory not reused) until
// the device has passed it.
struct InFlight {
  std::string label;
  int device = 0;
  cudaEvent_t start = nullptr, done = nullptr;
  std::vector<Tensor> tensors;
  std::chrono::steady_clock::time_point issued;
  ~InFlight() {
    if (start) cudaEventDestroy(start);
    if (done) cudaEventDestroy(done);
  }
};

struct Completion final : DeviceCompletion {
  std::shared_ptr<InFlight> work;
  void wait() const override {
    OnDevice on(work->device);
    check(cudaStreamWaitEvent(compute_stream(work->device), work->done, 0), "waiting for a collective");
  }
  bool done() const override { return cudaEventQuery(work->done) == cudaSuccess; }
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<ProcessGroup> gloo, int device, std::string name)
      : gloo_(std::move(gloo)), device_(device), name_(std::move(name)) {
    OnDevice on(device_);
    ncclUniqueId id{};
    if (gloo_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    Tensor shared = Tensor::empty({static_cast<int64_t>(sizeof id)}, DType::UInt8);
    std::memcpy(shared.raw_data(), &id, sizeof id);
    gloo_->broadcast(shared, 0);
    std::memcpy(&id, shared.raw_data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, gloo_->size(), id, gloo_->rank()), "joining the NCCL communicator");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating the communication stream");
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    cudaSetDevice(device_);                                // (no check: a destructor does not throw)
    if (aborted_.empty()) cudaStreamSynchronize(stream_);  // what is queued finishes before the communicator goes
    in_flight_.clear();
    if (aborted_.empty()) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return gloo_->rank(); }
  int size() const override { return gloo_->size(); }
  const Place& place() const override { return gloo_->place(); }
  const std::vector<int>& ranks() const override { return gloo_->ranks(); }
  std::chrono::milliseconds timeout() const override { return gloo_->timeout(); }
  std::string backend() const override { return "nccl"; }
  bool takes(const Device& d) const override {
    return d.type == DeviceType::CPU || (d.type == DeviceType::CUDA && d.index == device_);
  }

  // busy: the communication stream's time in collectives that finished (its
  // events); waited: the host's, in CPU tensors' collectives over Gloo (it
  // never blocks for a GPU's).
  Stats stats() const override {
    OnDevice on(device_);
    std::lock_guard<std::mutex> lock(mu_);
    retire_finished();
    const Stats cpu = gloo_->stats();
    return {collectives_ + cpu.collectives, busy_seconds_ + cpu.busy_seconds, cpu.waited_seconds};
  }

  Work all_reduce_async(Tensor t, ReduceOp op) override {
    if (on_cpu(t)) return gloo_->all_reduce_async(t, op);
    check_tensor(t, "all_reduce");
    const ncclDataType_t type = nccl_type(t.dtype(), "all_reduce");
    const ncclRedOp_t red = nccl_op(op, t.dtype(), "all_reduce");
    return submit("all_reduce", {t}, [&] {
      return ncclAllReduce(t.device_data(), t.device_data(), static_cast<size_t>(t.numel()), type, red, comm_, stream_);
    });
  }

  Work broadcast_async(Tensor t, int root) override {
    if (on_cpu(t)) return gloo_->broadcast_async(t, root);
    check_tensor(t, "broadcast");
    KILN_CHECK(root >= 0 && root < size(), "dist: broadcast from rank ", root, " in a group of ", size());
    return submit("broadcast", {t}, [&] {
      const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();  // any dtype, bool too
      return ncclBroadcast(t.device_data(), t.device_data(), bytes, ncclUint8, root, comm_, stream_);
    });
  }

  Work all_gather_async(Tensor out, Tensor in) override {
    if (on_cpu(in) && on_cpu(out)) return gloo_->all_gather_async(out, in);
    check_tensor(in, "all_gather", "an input");
    check_tensor(out, "all_gather", "an output");
    check_gather(out, in);
    return submit("all_gather", {out, in}, [&] {
      const size_t bytes = static_cast<size_t>(in.numel()) * in.element_size();
      return ncclAllGather(in.device_data(), out.device_data(), bytes, ncclUint8, comm_, stream_);
    });
  }

  Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp op) override {
    if (on_cpu(in) && on_cpu(out)) return gloo_->reduce_scatter_async(out, in, op);
    check_tensor(in, "reduce_scatter", "an input");
    check_tensor(out, "reduce_scatter", "an output");
    const ncclDataType_t type = nccl_type(in.dtype(), "reduce_scatter");
    const ncclRedOp_t red = nccl_op(op, in.dtype(), "reduce_scatter");
    check_scatter(out, in);
    return submit("reduce_scatter", {out, in}, [&] {
      return ncclReduceScatter(in.device_data(), out.device_data(), static_cast<size_t>(out.numel()), type, red, comm_,
                               stream_);
    });
  }

  // The ranks meet over Gloo; what this rank queued on its GPU before is
  // not waited for (as with any collective here, the stream orders it).
  Work barrier_async() override {
    throw_if_aborted();
    return gloo_->barrier_async();
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& members) override {
    throw_if_aborted();
    auto gloo = gloo_->new_group(members);  // checks the ranks; every member of this group calls it
    // Named as every member names it: its parent's name and how many the parent made.
    const std::string name = (name_ == "the world" ? "group " : name_ + ".") + std::to_string(++children_);
    if (!gloo) return nullptr;
    return std::make_shared<NcclGroup>(std::move(gloo), device_, name);
  }

 private:
  bool on_cpu(const Tensor& t) const { return t.defined() && t.device().type == DeviceType::CPU; }

  void check_tensor(const Tensor& t, const char* what, const char* role = "a") const {
    throw_if_aborted();
    const Device mine{DeviceType::CUDA, device_};
    KILN_CHECK(t.defined() && t.is_contiguous() && t.device() == mine, "dist: ", what, " over NCCL takes ", role,
               " contiguous tensor on cuda:", device_, " (this rank's GPU, its local rank ", place().local_rank,
               ") or on the CPU, got ", t.defined() ? t.meta_str() + " on " + t.device().str() : "an undefined one",
               "; call .contiguous() or .to(\"cuda:", device_, "\") first");
  }

  // Queues a collective on the communication stream, after the work the
  // caller's stream holds now; `launch` enqueues it and returns NCCL's status.
  template <typename Launch>
  Work submit(const char* what, std::vector<Tensor> tensors, Launch&& launch) {
    OnDevice on(device_);
    auto work = std::make_shared<InFlight>();
    work->label = std::string(what) + " #" + std::to_string(++issued_) + " of " + name_;
    work->device = device_;
    work->tensors = std::move(tensors);
    check(cudaEventCreateWithFlags(&work->start, cudaEventDefault), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&work->done, cudaEventDefault), "cudaEventCreate");
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_aborted_locked();
    check(cudaEventRecord(work->start, compute_stream(device_)), "marking the caller's stream");
    check(cudaStreamWaitEvent(stream_, work->start, 0), "ordering the communication stream");
    check_nccl(launch(), work->label.c_str(), comm_);
    check(cudaEventRecord(work->done, stream_), "marking the communication stream");
    work->issued = std::chrono::steady_clock::now();
    in_flight_.push_back(work);
    retire_finished();
    wake_.notify_all();
    auto completion = std::make_shared<Completion>();
    completion->work = std::move(work);
    return Work(std::move(completion));
  }

  // Drops the collectives the device has finished, counting their time (mu_ held).
  void retire_finished() const {
    while (!in_flight_.empty() && cudaEventQuery(in_flight_.front()->done) == cudaSuccess) {
      float ms = 0;
      // (start is recorded on the caller's stream: the time includes waiting for it)
      if (cudaEventElapsedTime(&ms, in_flight_.front()->start, in_flight_.front()->done) == cudaSuccess)
        busy_seconds_ += static_cast<double>(ms) * 1e-3;
      ++collectives_;
      in_flight_.pop_front();
    }
  }

  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_ && aborted_.empty()) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      retire_finished();
      if (in_flight_.empty()) continue;
      const InFlight& oldest = *in_flight_.front();
      const auto waited = std::chrono::steady_clock::now() - oldest.issued;
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (waited < timeout() && async == ncclSuccess) continue;
      aborted_ = ::kiln::detail::concat(
          "dist: ", oldest.label, " on rank ", place().rank, " (cuda:", device_, ") ",
          async != ncclSuccess ? std::string("failed: ") + ncclGetErrorString(async)
                               : "did not finish within " + std::to_string(timeout().count()) + " ms",
          "; the group's NCCL communicator was aborted. Another rank of the group stopped or did not call the same "
          "collectives in the same order: check its log");
      std::cerr << "kiln: " << aborted_ << std::endl;
      ncclCommAbort(comm_);
    }
  }

  void throw_if_aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    throw_if_aborted_locked();
  }
  void throw_if_aborted_locked() const { KILN_CHECK(aborted_.empty(), aborted_); }

  std::shared_ptr<ProcessGroup> gloo_;  // the same ranks: joining, CPU tensors, barriers
  int device_ = 0;
  std::string name_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // communication
  uint64_t issued_ = 0;
  int children_ = 0;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  mutable std::deque<std::shared_ptr<InFlight>> in_flight_;
  mutable int64_t collectives_ = 0;
  mutable double busy_seconds_ = 0;
  std::string aborted_;  // why the communicator was aborted
  bool stopping_ = false;
  std::thread watchdog_;  // last: starts once the rest exists
};

// The world over NCCL: every rank on the GPU of its local rank. The GPU is
// checked before joining, so that every rank fails alike, at once.
std::shared_ptr<ProcessGroup> join_over_nccl(const Place& place, const InitOptions& options) {
  int gpus = 0;
  const cudaError_t status = cudaGetDeviceCount(&gpus);
  KILN_CHECK(status == cudaSuccess && gpus > 0,
             "dist::init: backend 'nccl' runs collectives on CUDA devices, and this machine has none (",
             status == cudaSuccess ? "no GPU" : cudaGetErrorString(status),
             "); use backend 'gloo' for CPU tensors, or check the driver with nvidia-smi");
  KILN_CHECK(place.local_rank < gpus, "dist::init: rank ", place.rank, " is local rank ", place.local_rank,
             " on its host, and NCCL gives each local rank a GPU of its own (cuda:", place.local_rank,
             "), but this host has ", gpus, "; start at most ", gpus, " ranks per host (kiln launch --nproc ", gpus,
             ")");
  InitOptions over_gloo = options;
  over_gloo.backend = "gloo";
  std::shared_ptr<ProcessGroup> gloo = init(over_gloo);  // joins; names the ranks that did not come
  return std::make_shared<NcclGroup>(std::move(gloo), place.local_rank, "the world");
}

// Loading libkiln_nccl makes "nccl" a backend dist::init accepts.
const bool registered = [] {
  register_backend("nccl", join_over_nccl);
  return true;
}();

}  // namespace

}  // namespace kiln::dist

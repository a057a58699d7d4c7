#pragma once
// Distributed training: where this process sits among the ranks of a job,
// read from whichever launcher started it (kiln launch and torchrun, Slurm,
// ModelArts), with explicit values winning over the environment; and the
// process group its ranks form over Gloo (TCP), with collectives on tensors.
//
//   auto group = kiln::dist::init();         // reads RANK, WORLD_SIZE, MASTER_ADDR, ...
//   group->all_reduce(grad, kiln::dist::ReduceOp::Mean);
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::dist {

// This process's place in a job.
struct Place {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr;  // the host of rank 0, which hosts the rendezvous store
  int master_port = 0;
  // The job's hosts, in node order, where the launcher lists them (Slurm's
  // node list, ModelArts' worker hosts); empty otherwise.
  std::vector<std::string> hosts;
  // Which launcher's variables it came from: "torchrun", "slurm",
  // "modelarts", or "none" (a single process).
  std::string source = "none";
};

// Values that win over the environment (unset: read it).
struct PlaceOverrides {
  std::optional<int> rank, world_size, local_rank, local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

// Reads the place from these variables. torchrun's (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) come first, then
// Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
// or SLURM_TASKS_PER_NODE, SLURM_JOB_NODELIST; the master is the first node
// unless MASTER_ADDR says otherwise), then ModelArts' (VC_TASK_INDEX,
// VC_WORKER_NUM, VC_WORKER_HOSTS). Throws kiln::Error naming the variable
// when one is malformed or the values contradict each other.
Place place_from(const std::map<std::string, std::string>& env, const PlaceOverrides& overrides = {});
// The same from this process's environment.
Place place_from_environment(const PlaceOverrides& overrides = {});

// Expands a Slurm host list: "node[1-3,7],gpu[08-09]" gives node1, node2,
// node3, node7, gpu08, gpu09 (leading zeros kept). Throws on a malformed list.
std::vector<std::string> expand_host_list(const std::string& list);

enum class ReduceOp { Sum, Mean, Max, Min };

struct InitOptions {
  // "gloo": CPU tensors, over TCP between hosts and through shared memory
  // among the ranks of one host (libkiln_distributed). "nccl": CUDA tensors
  // on the GPU of the rank's local rank, CPU tensors over Gloo beside it
  // (libkiln_nccl, built with the CUDA backend where NCCL is found). "mpi"
  // is refused with a message that says why.
  std::string backend = "gloo";
  PlaceOverrides place;
  // For joining (every rank must arrive within it) and for every collective
  // (a rank that does not take part within it fails the others).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// How a backend whose collectives run on a device (NCCL's on a GPU) ends
// one: waiting queues the caller's stream behind it, and the host goes on.
class DeviceCompletion {
 public:
  virtual ~DeviceCompletion() = default;
  virtual void wait() const = 0;  // the caller's stream waits for the collective
  virtual bool done() const = 0;  // the device has finished it
};

// A collective started asynchronously. wait() blocks until it finished and
// rethrows its error; the tensors it was given must not be read or written
// before. For a collective on a device, wait() orders the caller's stream
// after it instead: the kernels and copies the caller queues next see its
// result, and the host does not block. A default-constructed Work is
// already complete.
class Work {
 public:
  Work() = default;
  // `waited_ns`: where wait() adds the time it blocked (the group's count).
  Work(std::shared_future<void> done, std::shared_ptr<std::atomic<int64_t>> waited_ns)
      : done_(std::move(done)), waited_ns_(std::move(waited_ns)) {}
  explicit Work(std::shared_ptr<const DeviceCompletion> on_device) : on_device_(std::move(on_device)) {}
  void wait() const;
  bool completed() const;

 private:
  std::shared_future<void> done_;
  std::shared_ptr<std::atomic<int64_t>> waited_ns_;
  std::shared_ptr<const DeviceCompletion> on_device_;
};

// Ranks joined by a communication backend: the world, or a sub-group of it.
// Collectives must be called by every rank of the group in the same order.
// A backend runs them in that order off the caller's thread, so the
// asynchronous forms overlap with whatever the caller computes meanwhile. A
// rank that never joins, dies or stops answering makes the others fail
// within the timeout with an error naming it and its host, never hang.
//
// Backends implement this interface and register a factory under their name
// (register_backend); Gloo ("gloo", CPU tensors over TCP and shared memory)
// lives in libkiln_distributed (Kiln::distributed), which registers it when
// it loads, and NCCL in libkiln_nccl, which init loads when asked for it.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;  // within this group
  virtual int size() const = 0;
  // The job's place of this process (its rank in the world).
  virtual const Place& place() const = 0;
  // The world ranks of this group's members, by group rank.
  virtual const std::vector<int>& ranks() const = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  // The backend's name ("gloo").
  virtual std::string backend() const = 0;
  // Whether the collectives take tensors on `device` (Gloo: the CPU; NCCL:
  // its GPU, and the CPU through Gloo).
  virtual bool takes(const Device& device) const { return device.type == DeviceType::CPU; }
  // Whether all_reduce goes through shared memory: every rank of the group
  // runs on this host (and none set KILN_DIST_SHARED_MEMORY=0). The other
  // collectives, and all_reduce across hosts, go over the network.
  virtual bool shared_memory() const { return false; }

  // Where the group's time went since it was made: collectives run, seconds
  // the communication thread spent in them, and seconds callers spent
  // blocked waiting for them. busy - waited is communication that overlapped
  // the caller's work (backward, under data parallelism).
  struct Stats {
    int64_t collectives = 0;
    double busy_seconds = 0, waited_seconds = 0;
  };
  virtual Stats stats() const = 0;

  // Reduces in place. Every dtype but bool; Mean: floating dtypes only.
  // float16 and bfloat16 add in float32 per step.
  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  // Copies root's tensor (any dtype) into every rank's.
  void broadcast(Tensor& t, int root = 0);
  // Every rank's tensor (same shape and dtype on each), stacked: [size, ...t.shape].
  Tensor all_gather(const Tensor& t);
  // t's first axis split in size() equal parts; rank r gets part r reduced
  // over the ranks. Moves as much data as an all-reduce's first half.
  Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
  void barrier();

  virtual Work all_reduce_async(Tensor t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual Work broadcast_async(Tensor t, int root = 0) = 0;
  virtual Work all_gather_async(Tensor out, Tensor in) = 0;                                     // out: [size, ...in.shape]
  virtual Work reduce_scatter_async(Tensor out, Tensor in, ReduceOp op = ReduceOp::Sum) = 0;  // out: in.shape[0] / size rows
  virtual Work barrier_async() = 0;

  // A sub-group of these ranks (group ranks, each once, in the order they
  // get their new ranks). Every rank of this group must call it, in the same
  // order as its other collectives; ranks not listed get nullptr.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) = 0;

 protected:
  // Whether the collective being submitted comes from a synchronous form,
  // whose caller waits for it at once: a backend may then run it on the
  // caller's thread instead of handing it over. Reading it clears it.
  bool take_waited_at_once() { return std::exchange(waited_at_once_, false); }
  // What every backend checks of all_gather's and reduce_scatter's tensors
  // (shapes and dtypes against the group's size), throwing what to change.
  void check_gather(const Tensor& out, const Tensor& in) const;
  void check_scatter(const Tensor& out, const Tensor& in) const;

 private:
  friend struct WaitedAtOnce;
  bool waited_at_once_ = false;
};

// Makes the world group of a job for a backend; called by init with the
// place read and checked.
using BackendFactory = std::function<std::shared_ptr<ProcessGroup>(const Place& place, const InitOptions& options)>;
// Makes `name` a backend init accepts (a library registers its backends
// when it loads). Registering a name again replaces the factory.
void register_backend(const std::string& name, BackendFactory make);
// The backends registered in this process, by name.
std::vector<std::string> registered_backends();

// A number that stands for the group in an op's attributes (graph mode's
// collective ops), and the group again from it; throws once it is gone.
int64_t handle_of(const std::shared_ptr<ProcessGroup>& group);
std::shared_ptr<ProcessGroup> group_of_handle(int64_t handle);

// Joins the job with options.backend: with Gloo, rank 0 hosts the
// rendezvous store at MASTER_ADDR:MASTER_PORT, every rank registers there
// and the ranks connect to each other. Throws kiln::Error naming the ranks
// that did not arrive within the timeout, or, for a backend this process
// lacks, what provides it.
std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

}  // namespace kiln::dist

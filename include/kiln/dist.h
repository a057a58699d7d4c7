#pragma once
// Distributed training: where this process sits among the ranks of a job,
// read from whichever launcher started it (kiln launch and torchrun, Slurm,
// ModelArts), with explicit values winning over the environment; and the
// process group its ranks form over Gloo (TCP), with collectives on tensors.
//
//   auto group = kiln::dist::init();         // reads RANK, WORLD_SIZE, MASTER_ADDR, ...
//   group->all_reduce(grad, kiln::dist::ReduceOp::Mean);
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
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

enum class ReduceOp { Sum, Mean, Max };

struct InitOptions {
  PlaceOverrides place;
  // For joining (every rank must arrive within it) and for every collective
  // (a rank that does not take part within it fails the others).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

// The ranks of a job joined over Gloo's TCP transport. Collectives work in
// place on contiguous CPU tensors of float32, float64, int32 or int64, and
// must be called by every rank in the same order. A rank that never joins,
// dies or stops answering makes the others fail within the timeout with an
// error naming what it could (the missing ranks at init), never hang.
class ProcessGroup {
 public:
  ~ProcessGroup();
  int rank() const;
  int size() const;
  const Place& place() const;

  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum);  // Mean: floating tensors only
  void broadcast(Tensor& t, int root = 0);
  void barrier();

  struct Impl;

 private:
  friend std::shared_ptr<ProcessGroup> init(const InitOptions& options);
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Joins the job: rank 0 hosts the rendezvous store at MASTER_ADDR:MASTER_PORT,
// every rank registers there and the ranks connect to each other. Throws
// kiln::Error naming the ranks that did not arrive within the timeout.
std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

}  // namespace kiln::dist

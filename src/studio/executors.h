#pragma once
// Where a job's launcher (`kiln launch`, which starts the ranks) runs: a
// process of the studio's own (the local executor), or a Slurm batch job
// (sbatch, then squeue and scontrol for its state). The job's folder must be
// visible at the same path wherever it runs: one machine, or a shared file
// system.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "studio/job_spec.h"

namespace kiln::studio {

struct LaunchRequest {
  std::vector<std::string> launcher;        // kiln launch and its options (before "--")
  std::vector<std::string> command;         // what each rank runs (after "--"; none: the launcher alone)
  int nnodes = 1;                           // more than one: kiln launch on each node (Slurm)
  std::map<std::string, std::string> env;   // added to the studio's environment
  std::string name;                         // the job's name, for Slurm's queue
  std::string job_dir;                      // the job's folder
  std::string workdir;                      // where the launcher starts
  std::string log_path;                     // its output
  double time_limit_s = 0;                  // 0: none
  Resources resources;                      // per node (Slurm asks for them)
  std::vector<int> cpu_slots;               // the local executor's cores it holds: the launcher is pinned to them
  // The local executor's sandbox (bubblewrap's program; "": none): the job's
  // folder writable, the rest of the machine read-only but `hidden` (the
  // studio's data), a /tmp and /dev/shm of its own, its own process ids.
  std::string sandbox;
  std::vector<std::string> hidden;
};

// The sandbox program (bubblewrap), when it works here; "" with *why otherwise.
std::string sandbox_program(std::string* why);

// One job's launcher, started or found again.
class Execution {
 public:
  virtual ~Execution() = default;
  // nullopt while it runs; its exit status once over (128 + N for signal N).
  virtual std::optional<int> poll() = 0;
  // Still waiting for resources (in Slurm's queue).
  virtual bool queued() { return false; }
  // While queued: why, in the executor's words with a gloss ("" when it gives none).
  virtual std::string queue_reason() { return ""; }
  // Asks it to stop: the launcher stops its ranks, then exits.
  virtual void terminate() = 0;
  // Ends whatever is left of it at once.
  virtual void kill() = 0;
  // Why it ended, when the executor knows more than the status (Slurm's
  // TIMEOUT or NODE_FAIL, say); empty otherwise.
  virtual std::string ended_because() { return ""; }
  // Its id in the executor (a Slurm job id), kept so that a studio started
  // again finds it; empty for an execution that ends with the studio.
  virtual std::string external_id() const { return ""; }
};

std::unique_ptr<Execution> start_local(const LaunchRequest& request);
// partition: empty for the cluster's default.
std::unique_ptr<Execution> start_slurm(const LaunchRequest& request, const std::string& partition);
// A Slurm job a previous studio process started.
std::unique_ptr<Execution> attach_slurm(const std::string& slurm_job_id, const std::string& job_dir);

// The studio's environment with `extra` set over it (VAR=value entries).
std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra);

// Runs a program to the end: its exit status and what it printed (stdout and
// stderr). env: the whole environment, or null for the studio's.
std::pair<int, std::string> run_program(const std::vector<std::string>& argv,
                                        const std::vector<std::string>* env = nullptr);

}  // namespace kiln::studio

#pragma once
// Training jobs under the local executor: each job's inputs are staged from
// the store into its folder, its ranks started through `kiln launch`, its
// output (and per-rank logs) synced back to the store while it runs and at
// the end. States: Creating, Pending, Running, Completed, Failed,
// Terminating, Terminated, Abnormal.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "studio/database.h"
#include "studio/executors.h"
#include "studio/folder_sync.h"
#include "studio/job_queue.h"
#include "studio/job_spec.h"
#include "studio/object_store.h"

namespace kiln::studio {

struct JobRecord {
  int64_t id = 0;
  JobSpec spec;
  std::string state, stage, reason, submitted_by;
  int exit_code = -1;  // -1: not exited
  int64_t created_ms = 0, started_ms = 0, ended_ms = 0;
  std::string executor;     // local or slurm
  std::string external_id;  // the Slurm job id, once it has one
  nlohmann::json stages;    // {"scheduling": ms, "preparing": ms, ...}: when it entered each stage
  nlohmann::json json() const;
};

class Jobs {
 public:
  // root: where job folders go; kiln: the kiln executable that runs `kiln
  // launch`; executor: local or slurm (then slurm_partition, empty for the
  // cluster's default). Jobs a previous studio left to Slurm are watched again.
  // capacity: what the local executor runs jobs on (0: the machine's cores
  // and memory; no GPUs unless given).
  Jobs(std::string root, Database& db, ObjectStore& store, std::string kiln, std::string executor = "local",
       std::string slurm_partition = "", Capacity capacity = {}, const std::string& sandbox = "auto",
       std::string data_dir = "");
  // Stops the jobs it runs itself (they end Abnormal, saying the studio
  // stopped); those Slurm runs go on, for the next studio to find.
  ~Jobs();

  int64_t submit(const JobSpec& spec, const std::string& submitted_by);
  // The job submitted again as a new one, its environment's values included.
  int64_t retry(int64_t id, const std::string& submitted_by);
  std::optional<JobRecord> get(int64_t id);
  std::vector<JobRecord> list(int limit);
  // Asks a job to stop: Terminating, then Terminated once its ranks are gone.
  void stop(int64_t id);
  // The sandbox program local jobs run in ("": none), for what else runs like a job.
  const std::string& sandbox() const { return bwrap_; }
  // What a project's running jobs may hold at once on the local executor (0: no limit).
  void set_quota(const std::string& project, const Capacity& quota);
  std::string folder(int64_t id) const { return root_ + "/" + std::to_string(id); }
  // Where jobs send their metrics (KILN_STUDIO_URL), with a token of their
  // own that lives as long as the job.
  void set_studio_url(std::string url) { studio_url_ = std::move(url); }

 private:
  struct Running;
  void run(int64_t id, std::shared_ptr<Running> running);
  void adopt(int64_t id, std::shared_ptr<Running> running, const std::string& slurm_id);
  void finish_run(int64_t id, bool over);
  void enter_stage(int64_t id, const std::string& stage);
  void set_state(int64_t id, const std::string& state, const std::string& stage, const std::string& reason = "");
  void finish(int64_t id, const std::string& state, const std::string& reason, int exit_code);
  // The spec a job runs with: its record's, with the environment's values.
  JobSpec spec_of(int64_t id);
  void stage_inputs(int64_t id, const JobSpec& spec);
  // Copies one object, or every object under a prefix, into a folder.
  void stage(const std::string& url, const std::string& what, const std::string& dir);
  // Uploads what changed in the output folder and logs since the last call
  // (`synced`: size and time of each file as last uploaded).
  using Synced = SyncedFiles;
  void sync_output(int64_t id, const JobSpec& spec, Synced& synced);
  // Watches a started job to its end (false: the studio is stopping and
  // leaves it to Slurm).
  bool monitor(int64_t id, const JobSpec& spec, Execution& execution, Running& running, Synced& synced);
  void end_job(int64_t id, const JobSpec& spec, Synced& synced, const std::string& state, const std::string& reason,
               int code);

  std::string root_;
  Database& db_;
  ObjectStore& store_;
  std::string kiln_;
  std::string executor_, slurm_partition_;
  JobQueue queue_;  // the local executor's cores, memory and GPUs
  std::string bwrap_;     // the sandbox program each local job runs in ("": none)
  std::string data_dir_;  // what the sandbox hides from jobs
  std::string studio_url_;
  std::mutex mu_;
  std::map<int64_t, std::shared_ptr<Running>> running_;
  std::map<int64_t, std::thread> threads_;  // joined once their job is over
};

}  // namespace kiln::studio

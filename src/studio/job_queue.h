#pragma once
// What the local executor may run at once, and the jobs waiting for it: a
// job starts when it is first in the queue (priority, then submission order)
// and its cores, memory and GPUs fit in what the running jobs leave free,
// and in what its project's quota leaves it. A job held back by its
// project's quota does not hold back the jobs of other projects behind it.
// Each running job holds particular cores (and GPUs), which it is pinned to.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "studio/job_spec.h"

namespace kiln::studio {

struct Capacity {
  int cpus = 0;
  int64_t memory_mb = 0;
  int gpus = 0;
  // This machine's cores and memory, and no GPUs, where a value is 0.
  Capacity resolved() const;
};

class JobQueue {
 public:
  explicit JobQueue(Capacity capacity);
  const Capacity& capacity() const { return capacity_; }
  // Refuses a job that could never run here, saying what the studio (or
  // its project's quota) offers.
  void check_fits(const JobSpec& spec) const;
  // What a project's running jobs may hold at once (0: no limit on that resource).
  void set_quota(const std::string& project, const Capacity& quota);

  struct Grant {
    std::vector<int> cpus, gpus;  // the slots it holds: core and GPU numbers
    int64_t memory_mb = 0;
  };
  // Takes the job's place in the queue, when it is submitted: its turn
  // follows priority and submission, not when its thread gets to acquire.
  void enqueue(int64_t id, const JobSpec& spec);
  // Waits for the job's turn (enqueueing it when it is not yet);
  // `waiting(reason)` is called whenever the reason it waits changes.
  // nullopt when `stopped()` turns true first.
  std::optional<Grant> acquire(int64_t id, const JobSpec& spec, const std::function<bool()>& stopped,
                               const std::function<void(const std::string&)>& waiting);
  void release(int64_t id, const Grant& grant);
  // Leaves the queue without running (nothing when it is not waiting).
  void forget(int64_t id);

 private:
  std::string reason_locked(size_t position, const JobSpec& spec) const;
  // Why the job's project's quota holds it back ("" when it does not).
  std::string quota_reason_locked(const JobSpec& spec) const;
  Capacity capacity_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<bool> cpu_taken_, gpu_taken_;
  int64_t memory_taken_ = 0;
  struct Waiter {
    int64_t id;
    JobSpec spec;
  };
  std::vector<Waiter> queue_;            // priority descending, then id
  std::map<int64_t, JobSpec> holders_;   // the running jobs, for the reasons
  std::map<std::string, Capacity> quotas_;  // by project
};

}  // namespace kiln::studio

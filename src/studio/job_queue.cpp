#include "studio/job_queue.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "kiln/error.h"

namespace kiln::studio {
namespace {

int64_t machine_memory_mb() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (meminfo >> key >> kb) {
    if (key == "MemTotal:") return kb / 1024;
    meminfo.ignore(256, '\n');
  }
  return 0;
}

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

Capacity Capacity::resolved() const {
  Capacity c = *this;
  if (c.cpus <= 0) c.cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (c.memory_mb <= 0) c.memory_mb = machine_memory_mb();
  return c;
}

JobQueue::JobQueue(Capacity capacity)
    : capacity_(capacity.resolved()), cpu_taken_(static_cast<size_t>(capacity_.cpus)),
      gpu_taken_(static_cast<size_t>(capacity_.gpus)) {}

void JobQueue::set_quota(const std::string& project, const Capacity& quota) {
  std::lock_guard<std::mutex> lock(mu_);
  quotas_[project] = quota;
  changed_.notify_all();
}

std::string JobQueue::quota_reason_locked(const JobSpec& spec) const {
  auto it = quotas_.find(spec.project);
  if (it == quotas_.end()) return "";
  const Capacity& quota = it->second;
  int cpus = 0, gpus = 0;
  int64_t memory_mb = 0;
  std::string held;
  for (const auto& [id, s] : holders_)
    if (s.project == spec.project) {
      cpus += s.cores(), gpus += s.resources.gpus, memory_mb += s.resources.memory_mb;
      held += (held.empty() ? "" : ", ") + std::to_string(id);
    }
  std::string over;
  if (quota.cpus > 0 && cpus + spec.cores() > quota.cpus)
    over = std::to_string(cpus) + " of its " + plural(quota.cpus, "CPU core", "CPU cores");
  else if (quota.memory_mb > 0 && memory_mb + spec.resources.memory_mb > quota.memory_mb)
    over = std::to_string(memory_mb) + " of its " + std::to_string(quota.memory_mb) + " MB";
  else if (quota.gpus > 0 && gpus + spec.resources.gpus > quota.gpus)
    over = std::to_string(gpus) + " of its " + plural(quota.gpus, "GPU", "GPUs");
  if (over.empty()) return "";
  return "waiting for project " + spec.project + "'s quota (" + over + " in use by job" +
         (held.find(',') == std::string::npos ? " " : "s ") + held + ")";
}

void JobQueue::check_fits(const JobSpec& spec) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = quotas_.find(spec.project);
    if (it != quotas_.end()) {
      const Capacity& q = it->second;
      KILN_CHECK(q.cpus <= 0 || spec.cores() <= q.cpus, "the job asks for ", plural(spec.cores(), "CPU core", "CPU cores"),
                 "; project ", spec.project, "'s quota is ", q.cpus);
      KILN_CHECK(q.memory_mb <= 0 || spec.resources.memory_mb <= q.memory_mb, "the job asks for ",
                 spec.resources.memory_mb, " MB of memory; project ", spec.project, "'s quota is ", q.memory_mb, " MB");
      KILN_CHECK(q.gpus <= 0 || spec.resources.gpus <= q.gpus, "the job asks for ",
                 plural(spec.resources.gpus, "GPU", "GPUs"), "; project ", spec.project, "'s quota is ", q.gpus);
    }
  }
  KILN_CHECK(spec.cores() <= capacity_.cpus, "the job asks for ", plural(spec.cores(), "CPU core", "CPU cores"),
             "; this studio runs jobs on ", capacity_.cpus, " (kiln studio serve --cpus): ask for at most ",
             capacity_.cpus);
  KILN_CHECK(spec.resources.memory_mb <= capacity_.memory_mb, "the job asks for ", spec.resources.memory_mb,
             " MB of memory; this studio offers ", capacity_.memory_mb, " MB (kiln studio serve --memory-mb)");
  KILN_CHECK(spec.resources.gpus <= capacity_.gpus, "the job asks for ", plural(spec.resources.gpus, "GPU", "GPUs"),
             "; this studio offers ", capacity_.gpus, " (kiln studio serve --gpus)");
}

std::string JobQueue::reason_locked(size_t position, const JobSpec& spec) const {
  const int64_t free_cpus = std::count(cpu_taken_.begin(), cpu_taken_.end(), false);
  const int64_t free_gpus = std::count(gpu_taken_.begin(), gpu_taken_.end(), false);
  std::string held;
  for (const auto& [id, s] : holders_) held += (held.empty() ? "" : ", ") + std::to_string(id);
  std::string why;
  if (spec.cores() > free_cpus)
    why = "waiting for " + plural(spec.cores(), "CPU core", "CPU cores") + " (" + std::to_string(capacity_.cpus - free_cpus) +
          " of " + std::to_string(capacity_.cpus) + " in use";
  else if (spec.resources.memory_mb > capacity_.memory_mb - memory_taken_)
    why = "waiting for " + std::to_string(spec.resources.memory_mb) + " MB of memory (" + std::to_string(memory_taken_) +
          " of " + std::to_string(capacity_.memory_mb) + " MB in use";
  else if (spec.resources.gpus > free_gpus)
    why = "waiting for " + plural(spec.resources.gpus, "GPU", "GPUs") + " (" + std::to_string(capacity_.gpus - free_gpus) +
          " of " + std::to_string(capacity_.gpus) + " in use";
  if (!why.empty()) why += held.empty() ? ")" : " by job" + std::string(holders_.size() == 1 ? " " : "s ") + held + ")";
  // Its own project's quota first; jobs ahead that only their quota holds back do not count.
  const std::string quota = quota_reason_locked(spec);
  if (!quota.empty()) why = quota;
  size_t ahead = 0;
  int64_t after = 0;
  for (size_t i = 0; i < position; ++i)
    if (quota_reason_locked(queue_[i].spec).empty()) ++ahead, after = queue_[i].id;
  if (ahead > 0)
    why += (why.empty() ? "" : "; ") + std::string("position ") + std::to_string(ahead + 1) + " in the queue, after job " +
           std::to_string(after);
  return why;
}

void JobQueue::enqueue(int64_t id, const JobSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::any_of(queue_.begin(), queue_.end(), [&](const Waiter& w) { return w.id == id; })) return;
  const int priority = spec.priority;
  queue_.insert(std::find_if(queue_.begin(), queue_.end(),
                             [&](const Waiter& w) {
                               return w.spec.priority < priority || (w.spec.priority == priority && w.id > id);
                             }),
                Waiter{id, spec});
  changed_.notify_all();
}

std::optional<JobQueue::Grant> JobQueue::acquire(int64_t id, const JobSpec& spec, const std::function<bool()>& stopped,
                                                 const std::function<void(const std::string&)>& waiting) {
  enqueue(id, spec);
  std::unique_lock<std::mutex> lock(mu_);
  std::string told;
  for (;;) {
    const size_t position = static_cast<size_t>(
        std::find_if(queue_.begin(), queue_.end(), [&](const Waiter& w) { return w.id == id; }) - queue_.begin());
    const std::string why = reason_locked(position, spec);
    if (stopped()) {
      queue_.erase(queue_.begin() + static_cast<long>(position));
      changed_.notify_all();
      return std::nullopt;
    }
    if (why.empty()) {  // first in the queue, and it fits: the lowest free cores and GPUs
      Grant g;
      for (size_t c = 0; c < cpu_taken_.size() && static_cast<int>(g.cpus.size()) < spec.cores(); ++c)
        if (!cpu_taken_[c]) cpu_taken_[c] = true, g.cpus.push_back(static_cast<int>(c));
      for (size_t c = 0; c < gpu_taken_.size() && static_cast<int>(g.gpus.size()) < spec.resources.gpus; ++c)
        if (!gpu_taken_[c]) gpu_taken_[c] = true, g.gpus.push_back(static_cast<int>(c));
      g.memory_mb = spec.resources.memory_mb;
      memory_taken_ += g.memory_mb;
      holders_[id] = spec;
      queue_.erase(queue_.begin() + static_cast<long>(position));
      changed_.notify_all();
      return g;
    }
    if (why != told) {
      told = why;
      lock.unlock();
      waiting(why);
      lock.lock();
      continue;  // the queue may have moved meanwhile
    }
    changed_.wait_for(lock, std::chrono::milliseconds(200));  // also to notice a stop
  }
}

void JobQueue::forget(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(queue_, [&](const Waiter& w) { return w.id == id; });
  changed_.notify_all();
}

void JobQueue::release(int64_t id, const Grant& grant) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int c : grant.cpus) cpu_taken_[static_cast<size_t>(c)] = false;
  for (int c : grant.gpus) gpu_taken_[static_cast<size_t>(c)] = false;
  memory_taken_ -= grant.memory_mb;
  holders_.erase(id);
  changed_.notify_all();
}

}  // namespace kiln::studio

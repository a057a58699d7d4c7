#include "kiln/thread_governor.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "kiln/error.h"
#include "kiln/parallel.h"

namespace kiln {

// Cores that runnable tasks other than the caller leave free: the fourth
// field of /proc/loadavg counts runnable tasks, the reader among them.
int ThreadGovernor::idle_cores_now() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;  // unknown: never a reason to try more threads
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  int running = 0;  // "load1 load5 load15 runnable/total last-pid"
  if (std::sscanf(buf, "%*f %*f %*f %d/", &running) != 1) return 0;
  return std::max(0, cores - std::max(0, running - 1));
}

ThreadGovernor::ThreadGovernor(int max_threads, IdleCores idle_cores)
    : idle_cores_(idle_cores ? std::move(idle_cores) : IdleCores(idle_cores_now)) {
  KILN_CHECK(max_threads >= 0, "ThreadGovernor: max_threads must be >= 0, got ", max_threads);
  int n = max_threads > 0 ? max_threads : get_num_threads();
  for (;; n /= 2) {
    Candidate c;
    c.threads = std::max(n, 1);
    candidates_.push_back(c);
    if (n <= 1) break;
  }
}

std::vector<int> ThreadGovernor::candidates() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& c : candidates_) out.push_back(c.threads);
  return out;
}

double ThreadGovernor::estimate_locked(const Candidate& c) const {
  const int n = std::min(c.runs, kWindow);
  if (n < kMinRuns) return -1.0;
  double sum = 0.0, slowest = 0.0;
  for (int i = 0; i < n; ++i) {
    sum += c.window[i];
    slowest = std::max(slowest, c.window[i]);
  }
  return n >= kWindow / 2 ? (sum - slowest) / (n - 1) : sum / n;
}

double ThreadGovernor::estimate(int threads) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& c : candidates_)
    if (c.threads == threads) return estimate_locked(c);
  return -1.0;
}

int ThreadGovernor::best_locked() const {
  int best = 0;
  double best_time = -1.0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    const double t = estimate_locked(candidates_[i]);
    if (t >= 0.0 && (best_time < 0.0 || t < best_time)) {
      best = static_cast<int>(i);
      best_time = t;
    }
  }
  return best;
}

int ThreadGovernor::best() const {
  std::lock_guard<std::mutex> lock(mu_);
  return candidates_[best_locked()].threads;
}

// Called while a count below the highest is best. When more cores are idle
// than there were once this count became best, the load that made the
// higher counts slower has gone (in part): the highest that fits is
// measured again from scratch, and returned to run now.
ThreadGovernor::Candidate* ThreadGovernor::watch_the_load(int best) {
  if (best != baseline_best_) {  // a new best: its load level is learnt anew
    baseline_best_ = best;
    baseline_idle_ = -1;
    reading_count_ = 0;
  }
  if (runs_ - last_wide_run_ < kQuietRunsBeforeReading || runs_ - last_read_ < kReadEvery ||
      run_seconds_since_read_ < kReadInterval)
    return nullptr;
  last_read_ = runs_;
  run_seconds_since_read_ = 0.0;
  readings_[reading_count_ % 4] = idle_cores_();
  ++reading_count_;
  if (reading_count_ < 4) return nullptr;
  const int idle = *std::min_element(readings_, readings_ + 4);
  if (baseline_idle_ < 0 || idle < baseline_idle_) {
    baseline_idle_ = idle;
    return nullptr;
  }
  if (idle == baseline_idle_) return nullptr;
  for (int i = 0; i < best; ++i) {  // from the highest count down
    Candidate& c = candidates_[i];
    if (c.threads > idle) continue;
    for (int j = i; j < best; ++j) candidates_[j].runs = 0;
    baseline_best_ = -1;
    last_wide_run_ = runs_;
    return &c;
  }
  baseline_idle_ = idle;
  return nullptr;
}

int ThreadGovernor::choose() {
  std::lock_guard<std::mutex> lock(mu_);
  ++runs_;
  // Every count is measured before any is preferred, taking turns so that
  // they all see the same load.
  Candidate* unmeasured = nullptr;
  for (auto& c : candidates_)
    if ((c.warm_runs < kWarmRuns || c.runs < kMinRuns) &&
        (!unmeasured || c.warm_runs + c.runs < unmeasured->warm_runs + unmeasured->runs))
      unmeasured = &c;
  if (unmeasured) {
    unmeasured->last_chosen = runs_;
    if (unmeasured->threads > 1) last_wide_run_ = runs_;
    return unmeasured->threads;
  }
  const int best = best_locked();
  Candidate* pick = &candidates_[best];
  for (auto& c : candidates_)
    if (c.confirm_left > 0) {
      --c.confirm_left;
      c.last_chosen = runs_;
      if (c.threads > candidates_[best].threads) last_wide_run_ = runs_;
      return c.threads;
    }
  const bool periodic = runs_ - last_look_ >= kExploreEvery && run_seconds_since_look_ >= kLookInterval;
  if (candidates_.size() > 1 && (explore_next_ || periodic || early_look(runs_))) {
    // After a run much slower than usual (a core was taken, maybe), and now
    // and then in any case, the count least recently run.
    explore_next_ = false;
    last_look_ = runs_;
    run_seconds_since_look_ = 0.0;
    pick = nullptr;
    for (size_t i = 0; i < candidates_.size(); ++i)
      if (static_cast<int>(i) != best && (!pick || candidates_[i].last_chosen < pick->last_chosen)) pick = &candidates_[i];
  } else if (best > 0) {
    if (Candidate* freed = watch_the_load(best)) pick = freed;
  }
  pick->last_chosen = runs_;
  if (pick->threads > candidates_[best].threads) last_wide_run_ = runs_;
  return pick->threads;
}

void ThreadGovernor::record(int threads, double seconds, double wall_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  const double ran = wall_seconds >= 0.0 ? wall_seconds : seconds;
  if (ran > 0.0) {
    run_seconds_since_read_ += ran;
    run_seconds_since_look_ += ran;
  }
  auto it = std::find_if(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.threads == threads; });
  if (it == candidates_.end() || !(seconds >= 0.0)) return;
  if (it->warm_runs < kWarmRuns) {
    ++it->warm_runs;
    return;
  }
  const Candidate& best = candidates_[best_locked()];
  const double best_time = estimate_locked(best);
  // At most one such look per kSlowRunLooksEvery runs and kLookInterval:
  // on a noisy machine slow runs are common, and each look is a run on a
  // worse count.
  if (&*it == &best && best_time >= 0.0 && seconds > kSlowRun * best_time && runs_ - last_look_ >= kSlowRunLooksEvery &&
      run_seconds_since_look_ >= kLookInterval)
    explore_next_ = true;
  it->window[it->runs % kWindow] = seconds;
  ++it->runs;
  if (&*it == &best || best_time < 0.0) return;
  if (it->burst == 0) {
    if (seconds < best_time && it->runs > kMinRuns) {  // an explored run that won: confirm it
      it->confirm_left = kConfirmRuns;
      it->burst = 1;
    }
    return;
  }
  if (++it->burst <= kConfirmRuns) return;
  // The burst is complete: when its mean beats the best, it stands for this
  // count from now on.
  double sum = 0.0;
  for (int i = 0; i < it->burst; ++i) sum += it->window[(it->runs - 1 - i) % kWindow];
  if (sum / it->burst < best_time) {
    double recent[kWindow];
    for (int i = 0; i < it->burst; ++i) recent[i] = it->window[(it->runs - it->burst + i) % kWindow];
    for (int i = 0; i < it->burst; ++i) it->window[i] = recent[i];
    it->runs = it->burst;
  }
  it->burst = 0;
}

namespace {
int threads_for(ThreadGovernor* g, bool measure) {
  if (!g) return get_num_threads();
  return measure ? g->choose() : g->best();
}
}  // namespace

GovernedRun::GovernedRun(std::shared_ptr<ThreadGovernor> governor, bool measure, double work)
    : governor_(std::move(governor)), measure_(measure), work_(work > 0 ? work : 1),
      threads_(threads_for(governor_.get(), measure)), limit_(threads_), start_(std::chrono::steady_clock::now()) {}

void GovernedRun::finished() {
  if (governor_ && measure_) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    governor_->record(threads_, seconds / work_, seconds);
  }
}

}  // namespace kiln

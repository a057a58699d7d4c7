#include "kiln/thread_governor.h"

#include <algorithm>

#include "kiln/error.h"
#include "kiln/parallel.h"

namespace kiln {

ThreadGovernor::ThreadGovernor(int max_threads) {
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
  return n >= 4 ? (sum - slowest) / (n - 1) : sum / n;
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
    return unmeasured->threads;
  }
  const int best = best_locked();
  Candidate* pick = &candidates_[best];
  if (candidates_.size() > 1 && (explore_next_ || runs_ % kExploreEvery == 0)) {
    // After a run much slower than usual (a core was taken, maybe), and now
    // and then in any case (a core given back), the count least recently run.
    explore_next_ = false;
    pick = nullptr;
    for (size_t i = 0; i < candidates_.size(); ++i)
      if (static_cast<int>(i) != best && (!pick || candidates_[i].last_chosen < pick->last_chosen)) pick = &candidates_[i];
  }
  pick->last_chosen = runs_;
  return pick->threads;
}

void ThreadGovernor::record(int threads, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(candidates_.begin(), candidates_.end(), [&](const Candidate& c) { return c.threads == threads; });
  if (it == candidates_.end() || !(seconds >= 0.0)) return;
  if (it->warm_runs < kWarmRuns) {
    ++it->warm_runs;
    return;
  }
  const Candidate& best = candidates_[best_locked()];
  const double best_time = estimate_locked(best);
  if (&*it == &best && best_time >= 0.0 && seconds > kSlowRun * best_time) explore_next_ = true;
  if (&*it != &best && it->runs >= kMinRuns && best_time >= 0.0 && seconds < best_time) {
    // An explored count beat the current choice: its older runs date from
    // another load, so it starts over from this one (and is measured again
    // at once, since it now has too few runs); the load changed, so the
    // remaining counts are looked at next.
    it->runs = 0;
    explore_next_ = true;
  }
  it->window[it->runs % kWindow] = seconds;
  ++it->runs;
}

}  // namespace kiln

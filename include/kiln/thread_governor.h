#pragma once
// The intra-op thread count of a piece of work that repeats (one inference
// signature, one training step), chosen from its own measured times. On a
// quiet machine every thread helps; when another process takes a core, a
// thread that loses it holds up every other at the end of each parallel
// region (oneDNN splits work statically), and fewer threads finish sooner.
#include <cstdint>
#include <mutex>
#include <vector>

namespace kiln {

// Caps get_num_threads() (and OpenMP's, so oneDNN's) on the calling thread
// for its lifetime; limits nest, the innermost wins only when lower.
class ThreadLimit {
 public:
  explicit ThreadLimit(int threads);
  ~ThreadLimit();
  ThreadLimit(const ThreadLimit&) = delete;
  ThreadLimit& operator=(const ThreadLimit&) = delete;

 private:
  int previous_;
};

class ThreadGovernor {
 public:
  // Tries max_threads, its halvings and 1; max_threads 0 takes get_num_threads().
  explicit ThreadGovernor(int max_threads = 0);

  int choose();                               // the thread count for the next run
  void record(int threads, double seconds);   // how long a run with that count took
  int best() const;                           // the count it would choose outside exploring
  std::vector<int> candidates() const;

  // The estimate behind the choice: mean of the recent runs with one count,
  // without their slowest (so one stray pause does not decide), or a
  // negative value while too few runs are known.
  double estimate(int threads) const;

 private:
  static constexpr int kWindow = 8;
  static constexpr int kMinRuns = 3;
  // The first runs of a count build its primitives and touch its memory.
  static constexpr int kWarmRuns = 2;
  static constexpr int64_t kExploreEvery = 100;
  static constexpr double kSlowRun = 1.5;  // times the estimate: a reason to look again
  struct Candidate {
    int threads = 1;
    double window[kWindow] = {};
    int runs = 0;       // samples seen (the window holds the last kWindow)
    int warm_runs = 0;  // runs not taken as samples
    int64_t last_chosen = 0;
  };
  int best_locked() const;
  double estimate_locked(const Candidate& c) const;
  mutable std::mutex mu_;
  std::vector<Candidate> candidates_;
  int64_t runs_ = 0;
  bool explore_next_ = false;
};

}  // namespace kiln

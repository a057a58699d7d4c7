#pragma once
// The intra-op thread count of a piece of work that repeats (one inference
// signature, one training step), chosen from its own measured times. On a
// quiet machine every thread helps; when another process takes a core, a
// thread that loses it holds up every other at the end of each parallel
// region (oneDNN splits work statically), and fewer threads finish sooner.
// Once on fewer threads, the governor watches the machine's load and
// measures the higher counts again when cores come free.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
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
  // How many cores no other process is running on now; the default reads
  // the count of runnable tasks in /proc/loadavg.
  using IdleCores = std::function<int()>;

  static int idle_cores_now();  // the default IdleCores

  // Tries max_threads, its halvings and 1; max_threads 0 takes get_num_threads().
  explicit ThreadGovernor(int max_threads = 0, IdleCores idle_cores = {});

  int choose();                               // the thread count for the next run
  // How long a run with that count took: `seconds` as the counts are
  // compared (per unit of work), `wall_seconds` as it ran (negative: the
  // same), which paces the load readings.
  void record(int threads, double seconds, double wall_seconds = -1.0);
  int best() const;                           // the count it would choose outside exploring
  std::vector<int> candidates() const;

  // The estimate behind the choice: mean of the recent runs with one count
  // (without the slowest once there are eight or more, so that one stray
  // pause does not decide; rare long stalls still count), or a negative
  // value while too few runs are known.
  double estimate(int threads) const;

 private:
  static constexpr int kWindow = 16;
  static constexpr int kMinRuns = 3;
  // The first runs of a count build its primitives and touch its memory.
  static constexpr int kWarmRuns = 2;
  // Looks at another count: every kExploreEvery runs, and no sooner than
  // kLookInterval seconds of running after the last look (a model that runs
  // in 40 us would otherwise spend a few percent of its runs on a worse
  // count).
  static constexpr int64_t kExploreEvery = 100;
  static constexpr double kLookInterval = 0.02;
  // And early on, at runs 16, 32 and 64: the first measurements may have
  // fallen in a noisy moment, and a load that the machine's load average
  // does not show (another virtual machine on the same host) starts no
  // look by itself.
  static bool early_look(int64_t run) { return run == 16 || run == 32 || run == 64; }
  static constexpr double kSlowRun = 1.5;  // times the estimate: a reason to look again
  static constexpr int64_t kSlowRunLooksEvery = 50;
  // An explored count whose run beat the best is run this many times more;
  // when those runs beat it too, its older samples (another load's, or a
  // noisy start's) are dropped.
  static constexpr int kConfirmRuns = 4;
  struct Candidate {
    int threads = 1;
    double window[kWindow] = {};
    int runs = 0;       // samples seen (the window holds the last kWindow)
    int warm_runs = 0;  // runs not taken as samples
    int64_t last_chosen = 0;
    int confirm_left = 0;  // runs still to take after an explored run beat the best
    int burst = 0;         // samples taken since that run, it included
  };
  int best_locked() const;
  double estimate_locked(const Candidate& c) const;
  Candidate* watch_the_load(int best);
  mutable std::mutex mu_;
  std::vector<Candidate> candidates_;
  int64_t runs_ = 0;
  bool explore_next_ = false;
  int64_t last_look_ = -1000;  // the last run that tried another count
  double run_seconds_since_look_ = 1e9;
  // While a lower count than the highest is best: idle cores read every few
  // runs and milliseconds of running (well after the last run on more
  // threads, whose workers may still be spinning), the fewest of the last
  // readings (a task that runs for a moment is not a load), and the level
  // they settled at for this best. (A reading takes about 6 us: every
  // eighth run of a 40 us model would pay it.)
  static constexpr int64_t kReadEvery = 8;
  static constexpr double kReadInterval = 0.004;  // seconds of runs between readings
  int64_t last_read_ = 0;
  double run_seconds_since_read_ = 0.0;
  static constexpr int64_t kQuietRunsBeforeReading = 16;
  IdleCores idle_cores_;
  int readings_[4] = {};
  int reading_count_ = 0;
  int baseline_idle_ = -1;
  int baseline_best_ = -1;
  int64_t last_wide_run_ = 0;  // the last run on more threads than the best
};

// One run under the count its governor chooses (every thread when there is
// none), timed for it by finished(); a run that throws is not counted. With
// `measure` false it takes the governor's best count and records nothing
// (a run of another size, such as an epoch's smaller last batch). `work`:
// how much work the run does relative to the others its governor times
// (runs of several sizes sharing one governor), its time recorded per unit.
class GovernedRun {
 public:
  explicit GovernedRun(std::shared_ptr<ThreadGovernor> governor, bool measure = true, double work = 1);
  void finished();

 private:
  std::shared_ptr<ThreadGovernor> governor_;
  bool measure_;
  double work_;
  int threads_;
  ThreadLimit limit_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace kiln

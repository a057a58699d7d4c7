// The thread governor on made-up run times and loads (a quiet machine, a
// core taken, the core given back, rare long stalls, a stray pause), and the
// per-thread limit it applies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/parallel.h"
#include "kiln/thread_governor.h"

namespace {
using namespace kiln;

// Runs the governor `runs` times against a clock; returns the counts chosen.
std::vector<int> drive(ThreadGovernor& g, int runs, const std::function<double(int)>& seconds) {
  std::vector<int> chosen;
  for (int i = 0; i < runs; ++i) {
    const int t = g.choose();
    g.record(t, seconds(t));
    chosen.push_back(t);
  }
  return chosen;
}

int count_of(const std::vector<int>& chosen, int threads, size_t from = 0) {
  int n = 0;
  for (size_t i = from; i < chosen.size(); ++i) n += chosen[i] == threads;
  return n;
}

// Every thread speeds the work up on a quiet machine.
double quiet(int threads) { return 0.010 / threads; }
// One core taken: the runs on many threads wait for the thread that lost it.
double one_core_taken(int threads) { return threads == 1 ? 0.011 : 0.030; }

TEST(ThreadGovernor, TriesTheCountsFromAllThreadsDownToOne) {
  EXPECT_EQ(ThreadGovernor(8).candidates(), (std::vector<int>{8, 4, 2, 1}));
  EXPECT_EQ(ThreadGovernor(3).candidates(), (std::vector<int>{3, 1}));
  EXPECT_EQ(ThreadGovernor(1).candidates(), (std::vector<int>{1}));
}

// A machine whose idle cores the test sets.
struct Machine {
  int idle = 0;
  ThreadGovernor::IdleCores reader() {
    return [this] { return idle; };
  }
};

TEST(ThreadGovernor, AQuietMachineRunsOnEveryThread) {
  Machine m{4};
  ThreadGovernor g(4, m.reader());
  auto chosen = drive(g, 300, quiet);
  EXPECT_EQ(g.best(), 4);
  EXPECT_GE(count_of(chosen, 4, 30), 265) << "exploring costs at most a few runs in a hundred";
  EXPECT_NEAR(g.estimate(4), 0.0025, 1e-9);
}

TEST(ThreadGovernor, ACoreTakenMovesTheWorkToFewerThreadsAndBack) {
  Machine m{2};
  ThreadGovernor g(2, m.reader());
  drive(g, 50, quiet);
  ASSERT_EQ(g.best(), 2);
  m.idle = 1;
  auto busy = drive(g, 200, one_core_taken);
  EXPECT_EQ(g.best(), 1);
  // It notices within a few slow runs and then stays on one thread.
  EXPECT_LE(count_of(std::vector<int>(busy.begin(), busy.begin() + 20), 2), 8);
  EXPECT_GE(count_of(busy, 1, 20), 175);
  // The core comes back: the load is watched, and two threads are measured again.
  m.idle = 2;
  auto back = drive(g, 150, quiet);
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(back, 2, 100), 48);
}

TEST(ThreadGovernor, ManyCountsFindTheirWayBackAfterALoadEnds) {
  Machine m{8};
  ThreadGovernor g(8, m.reader());
  drive(g, 60, quiet);
  m.idle = 1;
  drive(g, 150, [](int t) { return t == 1 ? 0.011 : 0.040; });
  ASSERT_EQ(g.best(), 1);
  m.idle = 8;
  drive(g, 150, quiet);
  EXPECT_EQ(g.best(), 8);
}

// Two threads usually win but stall now and then (their two threads sharing
// the one core left, each waiting for the other): on average one is faster.
TEST(ThreadGovernor, RareLongStallsCount) {
  Machine m{1};
  ThreadGovernor g(2, m.reader());
  int run = 0;
  auto chosen = drive(g, 400, [&](int t) {
    if (t == 1) return 0.0015;
    return ++run % 6 == 0 ? 0.060 : 0.0010;
  });
  EXPECT_EQ(g.best(), 1);
  EXPECT_LE(count_of(chosen, 2, 50), 20);
}

// Some models run faster on one thread even on a quiet machine; idle cores
// alone are no reason to keep measuring two.
TEST(ThreadGovernor, FewerThreadsThatWinOnAQuietMachineStay) {
  Machine m{2};
  ThreadGovernor g(2, m.reader());
  auto chosen = drive(g, 400, [](int t) { return t == 1 ? 0.0018 : 0.0020; });
  EXPECT_EQ(g.best(), 1);
  EXPECT_LE(count_of(chosen, 2, 20), 8);
}

// A noisy start made one thread look faster on a quiet machine: the next
// look at two threads wins, is confirmed, and two threads take over at once
// (their noisy first samples dropped).
TEST(ThreadGovernor, ANoisyStartIsCorrectedAtTheNextLook) {
  Machine m{2};
  ThreadGovernor g(2, m.reader());
  drive(g, 12, [](int t) { return t == 1 ? 0.006 : 0.030; });  // two threads slowed by a passing load
  ASSERT_EQ(g.best(), 1);
  auto chosen = drive(g, 40, quiet);  // the first quiet run is slower than the estimate: a look at once
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(chosen, 2, 20), 19);
}

// The same, with one thread as fast after the noise as during it (no slow
// run to start a look; the noise came from outside what the load average
// shows): an early look finds two threads faster well before run 100.
TEST(ThreadGovernor, ANoisyStartOnASteadyCountIsCorrectedEarly) {
  Machine m{2};
  ThreadGovernor g(2, m.reader());
  drive(g, 12, [](int t) { return t == 1 ? 0.010 : 0.030; });
  ASSERT_EQ(g.best(), 1);
  auto chosen = drive(g, 40, quiet);
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(chosen, 2, 25), 14);
}

TEST(ThreadGovernor, OneStrayPauseDoesNotMoveIt) {
  Machine m{2};
  ThreadGovernor g(2, m.reader());
  drive(g, 40, quiet);
  int run = 0;
  auto chosen = drive(g, 30, [&](int t) { return ++run == 3 && t == 2 ? 0.050 : quiet(t); });
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(chosen, 2), 26);
}

// A small model (40 us a run) on one thread: the load is read, and two
// threads looked at again, by the milliseconds of running, not every few
// runs (a reading costs about as much as a sixth of such a run); a
// millisecond model is still read every few runs.
TEST(ThreadGovernor, LoadReadingsAndLooksArePacedByRunTime) {
  int readings = 0;
  ThreadGovernor small(2, [&] { return ++readings, 2; });
  auto chosen = drive(small, 4000, [](int t) { return t == 1 ? 40e-6 : 60e-6; });
  ASSERT_EQ(small.best(), 1);
  EXPECT_LE(count_of(chosen, 2), 20) << "4000 runs of 40 us: 160 ms of running";
  EXPECT_LE(readings, 45) << "4000 runs of 40 us: 160 ms of running";
  EXPECT_GE(readings, 10);
  readings = 0;
  ThreadGovernor large(2, [&] { return ++readings, 2; });
  drive(large, 400, [](int t) { return t == 1 ? 1e-3 : 1.5e-3; });
  EXPECT_GE(readings, 30) << "one reading every eight or so runs";
}

TEST(ThreadGovernor, ReadsTheMachinesLoad) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const int idle = ThreadGovernor::idle_cores_now();
  EXPECT_GE(idle, 0);
  EXPECT_LE(idle, cores);
  // A thread that never stops running takes a core: at most cores - 1 idle.
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::thread spinner([&] {
    started = true;
    while (!stop) {
    }
  });
  while (!started) std::this_thread::yield();
  EXPECT_LE(ThreadGovernor::idle_cores_now(), cores - 1);
  stop = true;
  spinner.join();
}

TEST(ThreadGovernor, RunsFromManyThreadsAtOnce) {
  Machine m{4};
  ThreadGovernor g(4, m.reader());
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) callers.emplace_back([&] { drive(g, 200, quiet); });
  for (auto& t : callers) t.join();
  EXPECT_EQ(g.best(), 4);
}

// Runs of several sizes under one governor (a class of lengths) are timed
// per unit of their work: a run of 4 units that takes 8 ms counts as 2 ms,
// as long as one unit alone would.
TEST(GovernedRun, RunsOfSeveralSizesAreComparedPerUnitOfWork) {
  Machine m{2};
  auto g = std::make_shared<ThreadGovernor>(2, m.reader());
  for (int i = 0; i < 12; ++i) {
    const double work = i % 2 ? 4.0 : 1.0;
    GovernedRun run(g, true, work);
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int>(2000 * work)));
    run.finished();
  }
  int measured = 0;
  for (int threads : g->candidates()) {
    const double per_unit = g->estimate(threads);
    if (per_unit < 0) continue;
    ++measured;
    EXPECT_GT(per_unit, 0.0019) << threads << " threads";
    EXPECT_LT(per_unit, 0.0045) << threads << " threads: the runs of 4 units were not counted per unit";
  }
  EXPECT_GT(measured, 0);
}

TEST(ThreadLimit, CapsTheCountOnThisThreadOnly) {
  const int before = get_num_threads();
  set_num_threads(4);
  {
    ThreadLimit one(1);
    EXPECT_EQ(get_num_threads(), 1);
    {
      ThreadLimit more(3);  // a limit inside a lower one does not raise it
      EXPECT_EQ(get_num_threads(), 1);
    }
    int other_thread_sees = 0;
    std::thread([&] { other_thread_sees = get_num_threads(); }).join();
    EXPECT_EQ(other_thread_sees, 4);
    // parallel_for stays on the calling thread.
    std::set<std::thread::id> ran_on;
    std::mutex mu;
    parallel_for(1000, 1, [&](int64_t, int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      ran_on.insert(std::this_thread::get_id());
    });
    EXPECT_EQ(ran_on.size(), 1u);
    EXPECT_EQ(*ran_on.begin(), std::this_thread::get_id());
  }
  {
    ThreadLimit two(2);
    EXPECT_EQ(get_num_threads(), 2);
  }
  EXPECT_EQ(get_num_threads(), 4);
  set_num_threads(before);
}

}  // namespace

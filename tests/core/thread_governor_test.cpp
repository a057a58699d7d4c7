// The thread governor on made-up run times (a quiet machine, a core taken,
// the core given back, a stray pause), and the per-thread limit it applies.
#include <gtest/gtest.h>

#include <functional>
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

TEST(ThreadGovernor, AQuietMachineRunsOnEveryThread) {
  ThreadGovernor g(4);
  auto chosen = drive(g, 300, quiet);
  EXPECT_EQ(g.best(), 4);
  EXPECT_GE(count_of(chosen, 4, 30), 265) << "exploring costs at most a few runs in a hundred";
  EXPECT_NEAR(g.estimate(4), 0.0025, 1e-9);
}

TEST(ThreadGovernor, ACoreTakenMovesTheWorkToFewerThreadsAndBack) {
  ThreadGovernor g(2);
  drive(g, 50, quiet);
  ASSERT_EQ(g.best(), 2);
  auto busy = drive(g, 120, one_core_taken);
  EXPECT_EQ(g.best(), 1);
  // It notices within a few slow runs and then stays on one thread.
  EXPECT_LE(count_of(std::vector<int>(busy.begin(), busy.begin() + 20), 2), 8);
  EXPECT_GE(count_of(busy, 1, 20), 95);
  // The core comes back: found at the next look (every hundred runs at most).
  auto back = drive(g, 130, quiet);
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(back, 2, 110), 19);
}

TEST(ThreadGovernor, ManyCountsFindTheirWayBackAfterALoadEnds) {
  ThreadGovernor g(8);
  drive(g, 60, quiet);
  drive(g, 150, [](int t) { return t == 1 ? 0.011 : 0.040; });
  ASSERT_EQ(g.best(), 1);
  drive(g, 130, quiet);
  EXPECT_EQ(g.best(), 8) << "a count that wins makes the governor look at the others at once";
}

TEST(ThreadGovernor, OneStrayPauseDoesNotMoveIt) {
  ThreadGovernor g(2);
  drive(g, 40, quiet);
  int run = 0;
  auto chosen = drive(g, 30, [&](int t) { return ++run == 3 && t == 2 ? 0.050 : quiet(t); });
  EXPECT_EQ(g.best(), 2);
  EXPECT_GE(count_of(chosen, 2), 26);
}

TEST(ThreadGovernor, RunsFromManyThreadsAtOnce) {
  ThreadGovernor g(4);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) callers.emplace_back([&] { drive(g, 200, quiet); });
  for (auto& t : callers) t.join();
  EXPECT_EQ(g.best(), 4);
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

// The process group across real processes on loopback: ranks are forked
// children that join through rank 0's TCP store and run Gloo collectives;
// a rank that never comes, or dies, fails the others within the timeout
// with a message that names it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <csignal>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/dist.h"
#include "kiln/kiln.h"
#include "support/ranks.h"

using namespace kiln;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

void expect_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  if (got != want) throw std::runtime_error(std::string(what) + " gave other values");
}

TEST(ProcessGroup, CollectivesAgreeAcrossThreeRanks) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1, 2}, [&](int rank) {
    auto group = dist::init(as_rank(rank, 3, port));
    if (group->rank() != rank || group->size() != 3) throw std::runtime_error("wrong place");
    const float r = static_cast<float>(rank);
    Tensor t = from_vector<float>({r, 2 * r, 10}, {3});
    group->all_reduce(t);
    expect_equal(t.to_vector<float>(), {3, 6, 30}, "sum");
    t = from_vector<float>({r, -r, 1}, {3});
    group->all_reduce(t, dist::ReduceOp::Max);
    expect_equal(t.to_vector<float>(), {2, 0, 1}, "max");
    t = from_vector<float>({r, 3}, {2});
    group->all_reduce(t, dist::ReduceOp::Mean);
    expect_equal(t.to_vector<float>(), {1, 3}, "mean");
    Tensor ids = from_vector<int64_t>({rank + 1}, {1});
    group->all_reduce(ids);
    if (ids.to_vector<int64_t>()[0] != 6) throw std::runtime_error("int64 sum");
    Tensor w = rank == 1 ? from_vector<double>({1.5, 2.5}, {2}) : zeros({2}, DType::Float64);
    group->broadcast(w, 1);
    if (w.to_vector<double>() != std::vector<double>{1.5, 2.5}) throw std::runtime_error("broadcast");
    group->barrier();
    Tensor wrong = from_vector<float>({1, 2, 3, 4}, {2, 2}).transpose(0, 1);
    refused_saying([&] { group->all_reduce(wrong); }, "contiguous", "a non-contiguous tensor");
  });
  expect_all_succeeded(outcome);
}

// An all-reduce larger than a shared-memory round (4 MiB a rank), of an odd
// length, gives every rank the same bits, whichever transport carries it.
void reduce_large_and_odd(dist::ProcessGroup& group, int rank) {
  const int64_t n = (int64_t{5} << 20) / 4 + 7;
  Tensor t = Tensor::empty({n}, DType::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = 0.001f * static_cast<float>((i * 7 + rank * 13) % 1000) + 0.1f * rank;
  group.all_reduce(t);
  for (int64_t i : {int64_t{0}, int64_t{1} << 20, n / 2, n - 1}) {
    float want = 0;
    for (int r = 0; r < group.size(); ++r) want += 0.001f * static_cast<float>((i * 7 + r * 13) % 1000) + 0.1f * r;
    if (std::abs(p[i] - want) > 1e-4f) throw std::runtime_error("large sum at " + std::to_string(i));
  }
  // The same bits everywhere: every rank's checksum equals the maximum's.
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += p[i] * static_cast<double>(i % 97 + 1);
  Tensor mine = from_vector<double>({sum}, {1});
  Tensor most = mine.clone();
  group.all_reduce(most, dist::ReduceOp::Max);
  if (most.to_vector<double>()[0] != sum) throw std::runtime_error("ranks disagree on the reduced bits");
}

TEST(ProcessGroup, RanksOnOneHostReduceThroughSharedMemory) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1, 2}, [&](int rank) {
    auto group = dist::init(as_rank(rank, 3, port));
    if (!group->shared_memory()) throw std::runtime_error("three ranks on one host did not share memory");
    reduce_large_and_odd(*group, rank);
    Tensor h = from_vector<float>({1.5f + static_cast<float>(rank), -1}, {2}).to(DType::Float16);
    group->all_reduce(h, dist::ReduceOp::Min);
    if (h.to(DType::Float32).to_vector<float>() != std::vector<float>{1.5f, -1}) throw std::runtime_error("float16 min");
    auto pair = group->new_group({0, 2});
    if (pair && !pair->shared_memory()) throw std::runtime_error("a sub-group did not share memory");
    if (pair) {  // a size that differs between the ranks is refused on both, naming the other
      Tensor odd = ones({rank == 0 ? 10 : 12});
      refused_saying([&] { pair->all_reduce(odd); }, rank == 0 ? "reduces 10 elements of 4 bytes but rank 2 12 of 4"
                                                               : "reduces 12 elements of 4 bytes but rank 0 10 of 4",
                     "all-reduces of different sizes");
    }
    // Rank 0 made both segments (the world's and the pair's), named after
    // its pid; once every rank had mapped them, nothing of them is left in
    // /dev/shm, whatever happens to the job later.
    const std::string mine = "kiln-" + std::to_string(getpid()) + "-";
    if (rank == 0)
      for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
        if (entry.path().filename().string().rfind(mine, 0) == 0)
          throw std::runtime_error("left in /dev/shm: " + entry.path().string());
  });
  expect_all_succeeded(outcome);
}

// No socket breaks when a rank on the same host dies: the shared-memory
// all-reduce notices that its process is gone, long before the timeout,
// even while its parent has not reaped it yet (here rank 1 runs in a
// grandchild whose parent waits 8 s before reaping it).
TEST(ProcessGroup, ARankDyingInASharedMemoryAllReduceIsNamedBeforeTheTimeout) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  auto body = [&](int rank) {
    auto group = dist::init(as_rank(rank, 2, port, 30000ms));
    if (!group->shared_memory()) throw std::runtime_error("two ranks on one host did not share memory");
    group->barrier();
    if (rank == 1) _exit(7);
    Tensor t = ones({1 << 20});
    const auto asked = std::chrono::steady_clock::now();
    try {
      group->all_reduce(t);
    } catch (const Error&) {
      if (std::chrono::steady_clock::now() - asked > 5s) throw std::runtime_error("noticed only once it was reaped");
      throw;
    }
  };
  auto outcome = run_ranks({0, 1}, [&](int rank) {
    if (rank == 0) return body(0);
    const pid_t child = fork();
    if (child == 0) body(1);
    std::this_thread::sleep_for(8s);  // a zombie meanwhile
    int status = 0;
    waitpid(child, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  EXPECT_EQ(outcome.status[1], 7);
  EXPECT_EQ(outcome.status[0], 1);
  const std::string& said = outcome.messages[0];
  EXPECT_NE(said.find("all_reduce #2 of the world failed on rank 0"), std::string::npos) << said;
  EXPECT_NE(said.find("the process of rank 1 (pid "), std::string::npos) << said;
  EXPECT_NE(said.find(") is gone"), std::string::npos) << said;
}

TEST(ProcessGroup, OneRankTurningSharedMemoryOffPutsTheWholeGroupOnGloo) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1}, [&](int rank) {
    if (rank == 1) setenv("KILN_DIST_SHARED_MEMORY", "0", 1);
    auto group = dist::init(as_rank(rank, 2, port));
    if (group->shared_memory()) throw std::runtime_error("shared memory stayed on");
    reduce_large_and_odd(*group, rank);
  });
  expect_all_succeeded(outcome);
}

TEST(ProcessGroup, ARankThatNeverJoinsIsNamedWithinTheTimeout) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  // Ranks 0 and 2 of 3 start; rank 1 never does.
  auto outcome = run_ranks({0, 2}, [&](int rank) { dist::init(as_rank(rank, 3, port, 1500ms)); });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 15s);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(outcome.status[i], 1);
    EXPECT_NE(outcome.messages[i].find("rank(s) 1 of 3 did not join within 1500 ms"), std::string::npos)
        << outcome.messages[i];
  }
}

TEST(ProcessGroup, NoRankZeroIsAnUnreachableStore) {
  const int port = free_port();
  auto outcome = run_ranks({1}, [&](int rank) { dist::init(as_rank(rank, 2, port, 800ms)); });
  EXPECT_EQ(outcome.status[0], 1);
  EXPECT_NE(outcome.messages[0].find("could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << outcome.messages[0];
}

TEST(ProcessGroup, ARankThatDiesFailsTheOthersCollective) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  auto outcome = run_ranks({0, 1}, [&](int rank) {
    auto group = dist::init(as_rank(rank, 2, port, 3000ms));
    group->barrier();         // both connected
    if (rank == 1) _exit(7);  // then it dies without a word
    Tensor t = ones({1024});
    group->all_reduce(t);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_EQ(outcome.status[1], 7);
  EXPECT_EQ(outcome.status[0], 1);
  const std::string& said = outcome.messages[0];
  EXPECT_NE(said.find("all_reduce #2 of the world failed on rank 0"), std::string::npos) << said;
  EXPECT_NE(said.find("stopped answering"), std::string::npos) << said;
  EXPECT_NE(said.find("Rank 1 on "), std::string::npos) << said;
}

TEST(ProcessGroup, ARankThatHangsIsNamedWhenTheCollectiveTimesOut) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  auto outcome = run_ranks(
      {0, 1},
      [&](int rank) {
        auto group = dist::init(as_rank(rank, 2, port, 2000ms));
        group->barrier();
        if (rank == 1) raise(SIGSTOP);  // alive, holding its sockets open, answering nothing
        Tensor t = ones({16});
        group->all_reduce(t);
      });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_EQ(outcome.status[0], 1);
  const std::string& said = outcome.messages[0];
  EXPECT_NE(said.find("all_reduce #2 of the world failed on rank 0"), std::string::npos) << said;
  EXPECT_NE(said.find("stopped answering (no sign of life"), std::string::npos) << said;
  EXPECT_NE(said.find("Rank 1 on "), std::string::npos) << said;
}

TEST(ProcessGroup, GatherScatterAndAsyncWorkAcrossThreeRanks) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1, 2}, [&](int rank) {
    auto group = dist::init(as_rank(rank, 3, port));
    const float r = static_cast<float>(rank);
    Tensor gathered = group->all_gather(from_vector<float>({r, 10 + r}, {1, 2}));
    if (gathered.shape() != Shape{3, 1, 2}) throw std::runtime_error("all_gather shape " + gathered.meta_str());
    expect_equal(gathered.to_vector<float>(), {0, 10, 1, 11, 2, 12}, "all_gather");
    // Rows 2k and 2k+1 go to rank k, summed over the ranks.
    std::vector<float> rows;
    for (int i = 0; i < 6; ++i) rows.push_back(static_cast<float>(i) + 100 * r);
    Tensor part = group->reduce_scatter(from_vector<float>(rows, {6}));
    expect_equal(part.to_vector<float>(), {6.f * rank + 300, 6.f * rank + 303}, "reduce_scatter");
    Tensor mean = group->reduce_scatter(from_vector<float>(rows, {6}), dist::ReduceOp::Mean);
    expect_equal(mean.to_vector<float>(), {2.f * rank + 100, 2.f * rank + 101}, "reduce_scatter mean");
    // Several in flight at once finish in order, each with its own result.
    std::vector<Tensor> ts;
    std::vector<dist::Work> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(full({1000}, static_cast<double>(k + rank)));
      works.push_back(group->all_reduce_async(ts.back()));
    }
    works.push_back(group->barrier_async());
    for (auto& w : works) w.wait();
    for (int k = 0; k < 8; ++k)
      if (ts[k].to_vector<float>()[999] != static_cast<float>(3 * k + 3)) throw std::runtime_error("async all_reduce");
    // Every dtype Gloo can move, reduced in its own arithmetic.
    Tensor h = from_vector<float>({1.5f + r}, {1}).to(DType::Float16);
    group->all_reduce(h, dist::ReduceOp::Mean);
    if (h.to(DType::Float32).to_vector<float>()[0] != 2.5f) throw std::runtime_error("float16 mean");
    Tensor b = from_vector<float>({r}, {1}).to(DType::BFloat16);
    group->all_reduce(b, dist::ReduceOp::Max);
    if (b.to(DType::Float32).to_vector<float>()[0] != 2.f) throw std::runtime_error("bfloat16 max");
    Tensor u = from_vector<int64_t>({rank + 1, 7 - rank}, {2}).to(DType::UInt8);
    group->all_reduce(u, dist::ReduceOp::Min);
    if (u.to(DType::Int64).to_vector<int64_t>() != std::vector<int64_t>{1, 5}) throw std::runtime_error("uint8 min");
    Tensor flags = from_vector<int64_t>({rank == 2}, {1}).to(DType::Bool);
    Tensor bytes = flags.to(DType::UInt8);
    group->all_reduce(bytes, dist::ReduceOp::Max);
    refused_saying([&] { group->all_reduce(flags); }, "cast to uint8", "a bool reduction");
    Tensor ints = from_vector<int64_t>({1}, {1});
    refused_saying([&] { group->all_reduce(ints, dist::ReduceOp::Mean); }, "floating", "an integer mean");
  });
  expect_all_succeeded(outcome);
}

TEST(ProcessGroup, SubGroupsReduceAmongTheirOwnRanks) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1, 2}, [&](int rank) {
    auto world = dist::init(as_rank(rank, 3, port));
    auto pair = world->new_group({2, 0});  // rank 2 becomes the group's rank 0
    auto solo = world->new_group({1});
    if ((rank == 1) != (pair == nullptr) || (rank == 1) != (solo != nullptr)) throw std::runtime_error("membership");
    if (pair) {
      if (pair->size() != 2 || pair->rank() != (rank == 2 ? 0 : 1)) throw std::runtime_error("group rank");
      if (pair->ranks() != std::vector<int>{2, 0}) throw std::runtime_error("group ranks");
      Tensor t = from_vector<float>({static_cast<float>(rank)}, {1});
      pair->all_reduce(t);
      expect_equal(t.to_vector<float>(), {2}, "group sum");
      Tensor w = full({2}, static_cast<double>(rank));
      pair->broadcast(w, 0);  // from world rank 2
      expect_equal(w.to_vector<float>(), {2, 2}, "group broadcast");
    } else {
      Tensor t = ones({1});
      solo->all_reduce(t);
      expect_equal(t.to_vector<float>(), {1}, "a group of one");
    }
    Tensor all = ones({1});
    world->all_reduce(all);  // the world still works beside its groups
    expect_equal(all.to_vector<float>(), {3}, "world after groups");
    refused_saying([&] { world->new_group({0, 0}); }, "twice", "a rank given twice");
  });
  expect_all_succeeded(outcome);
}

}  // namespace

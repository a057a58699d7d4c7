// The process group across real processes on loopback: ranks are forked
// children that join through rank 0's TCP store and run Gloo collectives;
// a rank that never comes, or dies, fails the others within the timeout
// with a message that names it.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "kiln/dist.h"
#include "kiln/kiln.h"

using namespace kiln;
using namespace std::chrono_literals;

namespace {

int free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

dist::InitOptions as_rank(int rank, int world, int port, std::chrono::milliseconds timeout = 20s) {
  dist::InitOptions o;
  o.place.rank = rank;
  o.place.world_size = world;
  o.place.master_addr = "127.0.0.1";
  o.place.master_port = port;
  o.timeout = timeout;
  return o;
}

// Runs body(rank) in `ranks` forked processes; returns each one's exit status
// (0: the body returned; 1: it threw, its message on stderr; 2: it was killed
// after `limit`). `messages[r]` holds what rank r threw.
struct Outcome {
  std::vector<int> status;
  std::vector<std::string> messages;
};
Outcome run_ranks(const std::vector<int>& ranks, const std::function<void(int)>& body, std::chrono::seconds limit = 60s) {
  Outcome out;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r : ranks) {
    int fd[2];
    EXPECT_EQ(pipe(fd), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(fd[0]);
      int code = 0;
      try {
        body(r);
      } catch (const std::exception& e) {
        const std::string msg = e.what();
        if (write(fd[1], msg.data(), msg.size()) < 0) code = 3;
        code = 1;
      }
      close(fd[1]);
      _exit(code);
    }
    close(fd[1]);
    pids.push_back(pid);
    pipes.push_back(fd[0]);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (waitpid(pids[i], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], &status, 0);
        status = 2 << 8;
        break;
      }
      usleep(10000);
    }
    out.status.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
    std::string msg;
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[i], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
    close(pipes[i]);
    out.messages.push_back(msg);
  }
  return out;
}

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
    try {
      group->all_reduce(wrong);
      throw std::runtime_error("a non-contiguous tensor was taken");
    } catch (const Error& e) {
      if (std::string(e.what()).find("contiguous") == std::string::npos) throw;
    }
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(outcome.status[r], 0) << "rank " << r << ": " << outcome.messages[r];
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
  EXPECT_NE(outcome.messages[0].find("all_reduce failed on rank 0 of 2"), std::string::npos) << outcome.messages[0];
}

}  // namespace

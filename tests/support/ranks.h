#pragma once
// Ranks of a distributed test as forked processes on loopback.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/dist.h"
#include "support/error_message.h"

namespace kiln::testing {

// A loopback port nothing listens on, for a test's rendezvous store. Taken
// below the kernel's ephemeral range: a port from that range (what binding
// port 0 gives) can become the local end of another test's outgoing
// connection before rank 0 binds it, and the ranks then wait out their
// timeout on a store that is not theirs.
inline int free_port() {
  int ephemeral_low = 32768;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d", &ephemeral_low) != 1) ephemeral_low = 32768;
    std::fclose(f);
  }
  const int low = 10000, span = std::max(1000, ephemeral_low - low);
  std::mt19937 pick(static_cast<unsigned>(getpid()) * 2654435761u ^
                    static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int port = low + static_cast<int>(pick() % static_cast<unsigned>(span));
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(s);
    if (free) return port;
  }
  throw std::runtime_error("free_port: no free loopback port below " + std::to_string(ephemeral_low));
}

inline dist::InitOptions as_rank(int rank, int world, int port, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  dist::InitOptions o;
  o.place.rank = rank;
  o.place.world_size = world;
  o.place.master_addr = "127.0.0.1";
  o.place.master_port = port;
  o.timeout = timeout;
  return o;
}

// Runs body(rank) in `ranks` forked processes; returns each one's exit status
// (0: the body returned; 1: it threw; 2: it was killed: after `limit`, or
// stopped while the others finished). `messages[r]` holds what rank r threw.
struct Outcome {
  std::vector<int> status;
  std::vector<std::string> messages;
};
inline Outcome run_ranks(const std::vector<int>& ranks, const std::function<void(int)>& body, std::chrono::seconds limit = std::chrono::seconds(60)) {
  Outcome out;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r : ranks) {
    int fd[2];
    if (pipe(fd) != 0) std::abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(fd[0]);
      int code = 0;
      try {
        body(r);
      } catch (const std::exception& e) {
        const std::string msg = e.what();
        code = write(fd[1], msg.data(), msg.size()) < 0 ? 3 : 1;
      }
      close(fd[1]);
      _exit(code);
    }
    close(fd[1]);
    pids.push_back(pid);
    pipes.push_back(fd[0]);
  }
  // Waits for every rank; one that stopped itself (SIGSTOP: a hung rank) is
  // killed once the others are done, and so is every rank after `limit`.
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<int> status(pids.size(), -1);
  std::vector<bool> stopped(pids.size(), false);
  for (;;) {
    size_t running = 0, halted = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (status[i] >= 0) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG | WUNTRACED) == pids[i]) {
        if (WIFSTOPPED(st)) stopped[i] = true;
        else status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
      }
      if (status[i] < 0) {
        ++running;
        halted += stopped[i] ? 1 : 0;
      }
    }
    if (running == 0) break;
    if (running == halted || std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < pids.size(); ++i)
        if (status[i] < 0) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          status[i] = 2;
        }
      break;
    }
    usleep(10000);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    out.status.push_back(status[i]);
    std::string msg;
    char buf[4096];
    ssize_t n;
    while ((n = read(pipes[i], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
    close(pipes[i]);
    out.messages.push_back(msg);
  }
  return out;
}


// Every rank's body returned.
inline void expect_all_succeeded(const Outcome& outcome) {
  for (size_t r = 0; r < outcome.status.size(); ++r)
    EXPECT_EQ(outcome.status[r], 0) << "rank " << r << ": " << outcome.messages[r];
}

// Inside a rank's body, which reports by throwing: throws unless `call`
// is refused with a kiln::Error whose message has `words`.
inline void refused_saying(const std::function<void()>& call, const std::string& words, const std::string& what) {
  const std::string said = message_of(call);
  if (said.find(words) == std::string::npos) throw std::runtime_error(what + ": " + said);
}

}  // namespace kiln::testing

#pragma once
// Ranks of a distributed test as forked processes on loopback.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <vector>

#include "kiln/dist.h"

namespace kiln::testing {

inline int free_port() {
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
// (0: the body returned; 1: it threw, its message on stderr; 2: it was killed
// after `limit`). `messages[r]` holds what rank r threw.
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


}  // namespace kiln::testing

#pragma once
// `kiln serve` (the CLI under test, KILN_CLI) in a process of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace kiln::testing {

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Starts `kiln serve ARGS --port 0` with stderr to `log` and waits until it is
// ready. Returns its pid and port; the port is 0 when it did not become ready
// (the pid is then 0 too when the process has already exited, and reaped).
inline std::pair<pid_t, int> start_serve_process(std::vector<std::string> args, const std::filesystem::path& log) {
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    args.insert(args.begin(), {KILN_CLI, "serve"});
    args.push_back("--port");
    args.push_back("0");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(KILN_CLI, argv.data());
    ::_exit(127);
  }
  int port = 0;
  for (int i = 0; i < 300 && port == 0 && pid > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::string text = read_all(log);
    auto at = text.find("ready on 127.0.0.1:");
    if (at != std::string::npos) port = std::atoi(text.c_str() + at + std::strlen("ready on 127.0.0.1:"));
    int status = 0;
    if (port == 0 && ::waitpid(pid, &status, WNOHANG) == pid) pid = 0;
  }
  return {pid, port};
}

}  // namespace kiln::testing

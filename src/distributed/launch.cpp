// kiln launch: the ranks of this host as child processes, their output
// prefixed on the terminal and kept per rank, and a failing rank stopping
// the job with a report.
#include "kiln/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/child_process.h"
#include "kiln/error.h"

namespace kiln::dist {
namespace {

constexpr size_t kLastLines = 20;  // of a failed rank, in the report

volatile sig_atomic_t interrupted = 0;
void on_interrupt(int) { interrupted = 1; }

std::string now_utc() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[48];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<long long>(micros));
  return text;
}

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = s >= 0 && bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (s >= 0) close(s);
  KILN_CHECK(ok, "kiln launch: could not find a free port for the rendezvous store (", std::strerror(errno),
             "); pass --master HOST:PORT");
  return ntohs(a.sin_port);
}

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  int out = -1;  // its stdout and stderr
  std::string partial;
  std::ofstream log;
  std::deque<std::string> last;
  bool running = true;
  int status = 0;
};

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// The child: its own process group (so the job can stop what it started),
// output into the pipe, the launcher's variables, then the command.
[[noreturn]] void become_rank(const LaunchOptions& o, int local, int write_end, const std::string& addr, int port) {
  kiln::detail::reset_signals_for_exec();  // SIGTERM stops a rank, whatever mask the launcher was started with
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher killed outright takes its ranks along
  dup2(write_end, STDOUT_FILENO);
  dup2(write_end, STDERR_FILENO);
  close(write_end);
  const int world = o.nnodes * o.nproc;
  setenv("RANK", std::to_string(o.node_rank * o.nproc + local).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(o.nproc).c_str(), 1);
  setenv("MASTER_ADDR", addr.c_str(), 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  // The host's cores shared among its ranks, unless the caller chose.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  setenv("KILN_NUM_THREADS", std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc))).c_str(), 0);
  std::vector<char*> argv;
  for (const auto& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "kiln launch: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  _exit(127);
}

void take_line(Rank& r, const std::string& text, const std::string& host, bool echo) {
  if (echo) {
    const std::string shown = "[rank " + std::to_string(r.rank) + "] " + text + "\n";
    std::fwrite(shown.data(), 1, shown.size(), stdout);
  }
  r.log << format_log_line({now_utc(), host, r.rank, text}) << "\n";
  r.log.flush();
  r.last.push_back(text);
  if (r.last.size() > kLastLines) r.last.pop_front();
}

// Reads what is there; false at the end of the output.
bool drain(Rank& r, const std::string& host, bool echo) {
  char buffer[65536];
  const ssize_t n = read(r.out, buffer, sizeof buffer);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!r.partial.empty()) take_line(r, r.partial, host, echo);
    r.partial.clear();
    return false;
  }
  r.partial.append(buffer, static_cast<size_t>(n));
  size_t start = 0, end;
  while ((end = r.partial.find('\n', start)) != std::string::npos) {
    take_line(r, r.partial.substr(start, end - start), host, echo);
    start = end + 1;
  }
  r.partial.erase(0, start);
  if (echo) std::fflush(stdout);
  return true;
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) kill(-r.pid, sig);
}

}  // namespace

int launch(const LaunchOptions& o) {
  KILN_CHECK(!o.command.empty(), "kiln launch: no command to run; put it after --, as in: kiln launch -n 2 -- kiln train R.yaml");
  KILN_CHECK(o.nproc >= 1 && o.nproc <= 1024, "kiln launch: -n must be 1 to 1024 ranks per host, got ", o.nproc);
  KILN_CHECK(o.nnodes >= 1 && o.node_rank >= 0 && o.node_rank < o.nnodes, "kiln launch: --node-rank ", o.node_rank,
             " is not in [0, --nnodes ", o.nnodes, ")");
  KILN_CHECK(o.nnodes == 1 || !o.master.empty(), "kiln launch: with --nnodes ", o.nnodes,
             ", every host needs --master HOST:PORT (the host of rank 0 and a free port there)");
  std::string addr = "127.0.0.1";
  int port = 0;
  if (o.master.empty()) {
    port = free_port();
  } else {
    const size_t colon = o.master.rfind(':');
    KILN_CHECK(colon != std::string::npos && colon > 0, "kiln launch: --master must be HOST:PORT, got '", o.master, "'");
    addr = o.master.substr(0, colon);
    try {
      port = std::stoi(o.master.substr(colon + 1));
    } catch (const std::exception&) {
      port = 0;
    }
    KILN_CHECK(port > 0 && port < 65536, "kiln launch: --master '", o.master, "' has no valid port");
  }
  std::filesystem::create_directories(o.log_dir);
  const std::string host = this_host();
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  for (int local = 0; local < o.nproc; ++local) {
    Rank& r = ranks[static_cast<size_t>(local)];
    r.rank = o.node_rank * o.nproc + local;
    const std::string path = o.log_dir + "/rank-" + std::to_string(r.rank) + ".log";
    r.log.open(path, std::ios::app);
    KILN_CHECK(r.log.good(), "kiln launch: cannot write '", path, "'; choose another --log-dir");
  }
  struct sigaction act {};
  act.sa_handler = on_interrupt;
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &act, &old_int);
  sigaction(SIGTERM, &act, &old_term);
  std::fflush(stdout);
  for (int local = 0; local < o.nproc; ++local) {
    Rank& r = ranks[static_cast<size_t>(local)];
    int fd[2];
    KILN_CHECK(pipe2(fd, O_CLOEXEC) == 0, "kiln launch: pipe failed: ", std::strerror(errno));
    r.pid = fork();
    KILN_CHECK(r.pid >= 0, "kiln launch: fork failed: ", std::strerror(errno));
    if (r.pid == 0) {
      close(fd[0]);
      become_rank(o, local, fd[1], addr, port);
    }
    setpgid(r.pid, r.pid);  // also here: no race with a kill before the child ran
    close(fd[1]);
    r.out = fd[0];
  }
  int failed = -1;  // the first rank that failed
  std::chrono::steady_clock::time_point kill_at{};
  size_t open_outputs = ranks.size(), running = ranks.size();
  bool forwarded = false;
  while (open_outputs > 0 || running > 0) {
    std::vector<pollfd> fds;
    std::vector<Rank*> owners;
    for (auto& r : ranks)
      if (r.out >= 0) {
        fds.push_back({r.out, POLLIN, 0});
        owners.push_back(&r);
      }
    if (!fds.empty()) poll(fds.data(), fds.size(), 100);
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
        if (!drain(*owners[i], host, o.echo)) {
          close(owners[i]->out);
          owners[i]->out = -1;
          --open_outputs;
        }
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      if (waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      r.status = status;
      --running;
      if (failed < 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        failed = r.rank;
        signal_all(ranks, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + o.grace;
      }
    }
    if (interrupted && !forwarded) {
      signal_all(ranks, SIGTERM);
      forwarded = true;
      kill_at = std::chrono::steady_clock::now() + o.grace;
    }
    if ((failed >= 0 || forwarded) && running > 0 && std::chrono::steady_clock::now() > kill_at) signal_all(ranks, SIGKILL);
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (failed < 0) return interrupted ? 130 : 0;
  const Rank& bad = ranks[static_cast<size_t>(failed - o.node_rank * o.nproc)];
  std::string report = "kiln launch: rank " + std::to_string(bad.rank) + " (pid " + std::to_string(bad.pid) + ") " +
                       describe(bad.status) + (ranks.size() > 1 ? "; the other ranks were stopped" : "") + ". ";
  if (bad.last.empty()) {
    report += "It printed nothing.\n";
  } else {
    report += "Its last lines (" + o.log_dir + "/rank-" + std::to_string(bad.rank) + ".log):\n";
    for (const auto& line : bad.last) report += "  " + line + "\n";
  }
  std::fwrite(report.data(), 1, report.size(), stderr);
  return exit_code(bad.status);
}

}  // namespace kiln::dist

// The local executor: the launcher as a child process of the studio, in a
// session of its own. The launcher puts each rank in a process group of its
// own, and those stay in the session: stopping the session reaches every rank
// and whatever they started.
#include <dirent.h>
#include <sched.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "core/child_process.h"
#include "kiln/error.h"
#include "studio/executors.h"
#include "studio/memory_cgroup.h"

extern char** environ;

namespace kiln::studio {

std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    // The studio's database URL may hold its password: no job gets it.
    if (!extra.count(name) && name != "KILN_STUDIO_DB") out.push_back(entry);
  }
  for (auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

namespace {

namespace fs = std::filesystem;

// Said once per studio: jobs' memory is then only what admission counts.
void warn_once_unenforced(const std::string& why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr, "kiln studio: jobs' memory (resources.memory_mb) is a claim for admission only, not a "
                 "limit: %s\n", why.c_str());
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int status_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Calls visit(pid, ppid, session) for every live process (zombies left out).
void for_each_process(const std::function<void(long pid, long ppid, long session)>& visit) {
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0, session = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) != 4) continue;
    if (state == 'Z' || state == 'X') continue;
    visit(pid, ppid, session);
  }
  ::closedir(proc);
}

// Sends `sig` to every live process of session `sid`; returns how many there were.
int signal_session(pid_t sid, int sig) {
  int found = 0;
  for_each_process([&](long pid, long, long session) {
    if (session != sid) return;
    ++found;
    ::kill(static_cast<pid_t>(pid), sig);
  });
  return found;
}

class LocalExecution final : public Execution {
 public:
  explicit LocalExecution(const LaunchRequest& r) {
    // Everything the child needs is built before fork: between fork and exec
    // a child of a threaded process may only make system calls.
    KILN_CHECK(r.nnodes == 1, "the local executor runs a job on this machine only; nnodes ", r.nnodes,
               " needs the Slurm executor (kiln studio serve --executor slurm)");
    std::vector<std::string> argv, environment = environment_with(r.env);
    if (!r.sandbox.empty()) {
      // The job's folder writable, the machine read-only (a recipe given by
      // its path is read where it is), the studio's data out of sight, and
      // a /dev/shm and process ids of its own. Its HOME and TMPDIR are in
      // its folder, where it may write.
      sandboxed_ = true;
      argv = {r.sandbox, "--die-with-parent", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm",
              "--proc", "/proc", "--unshare-pid"};
      for (const std::string& h : r.hidden) argv.insert(argv.end(), {"--tmpfs", h});
      const std::string home = r.job_dir + "/home", tmp = r.job_dir + "/tmp";
      std::error_code ec;
      fs::create_directories(home, ec);
      fs::create_directories(tmp, ec);
      argv.insert(argv.end(), {"--bind", r.job_dir, r.job_dir, "--setenv", "HOME", home, "--setenv", "TMPDIR", tmp,
                               "--chdir", r.workdir, "--"});
    }
    argv.insert(argv.end(), r.launcher.begin(), r.launcher.end());
    if (!r.command.empty()) {
      argv.push_back("--");
      argv.insert(argv.end(), r.command.begin(), r.command.end());
    }
    std::vector<char*> args = pointers(argv), envp = pointers(environment);
    const std::string log_path = r.log_path, workdir = r.workdir;
    // Its memory claim becomes a limit the kernel enforces, where it can.
    if (r.resources.memory_mb > 0) {
      std::string why;
      memory_ = MemoryCgroup::create("kiln-job-" + std::to_string(::getpid()) + "-" + fs::path(r.job_dir).filename().string(),
                                     r.resources.memory_mb, &why);
      if (!memory_) warn_once_unenforced(why);
    }
    const std::string procs = memory_ ? memory_->procs_file() : "";
    // The cores it holds, as cores of this machine: slot i is the i-th core
    // the studio may use (wrapping round when the studio offers more).
    cpu_set_t pinned;
    CPU_ZERO(&pinned);
    cpu_set_t allowed;
    const bool pin = !r.cpu_slots.empty() && ::sched_getaffinity(0, sizeof allowed, &allowed) == 0;
    if (pin) {
      std::vector<int> cores;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &allowed)) cores.push_back(c);
      for (int slot : r.cpu_slots) CPU_SET(cores[static_cast<size_t>(slot) % cores.size()], &pinned);
    }
    pid_ = ::fork();
    KILN_CHECK(pid_ >= 0, "cannot start the job: fork failed: ", std::strerror(errno));
    if (pid_ == 0) {
      kiln::detail::reset_signals_for_exec();  // the studio blocks SIGTERM; the job must not
      ::setsid();  // the job's own session: stopping it reaches every rank's process group
      if (pin) ::sched_setaffinity(0, sizeof pinned, &pinned);  // its ranks inherit it
      // Into its memory cgroup before it runs anything (its ranks follow).
      if (!procs.empty() && !MemoryCgroup::join(procs.c_str())) _exit(125);
      int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log >= 0) {
        ::dup2(log, 1);
        ::dup2(log, 2);
      }
      int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (null >= 0) ::dup2(null, 0);
      if (::chdir(workdir.c_str()) != 0) _exit(126);
      ::execve(args[0], args.data(), envp.data());
      static const char message[] = "kiln: error: cannot run the kiln executable that starts the job\n";
      ssize_t ignored = ::write(2, message, sizeof message - 1);
      (void)ignored;
      _exit(127);
    }
  }
  ~LocalExecution() override {
    if (!code_) {
      kill();
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  std::optional<int> poll() override {
    if (code_) return code_;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      code_ = status_code(status);
      // Nothing of the job outlives it, and it is over only once its last
      // process is: the output synced after this is final.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (signal_session(pid_, SIGKILL) > 0 && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return code_;
  }
  std::string ended_because() override {
    if (!memory_ || !memory_->out_of_memory()) return "";
    return "a process of the job went past its " + std::to_string(memory_->limit_mb()) +
           " MB of memory (resources.memory_mb) and the kernel killed it; ask for more memory, or use less";
  }
  // The launcher forwards it to its ranks and exits when they have. In the
  // sandbox it is the child of bubblewrap's own child (which reaps inside),
  // and bubblewrap would end everything at once on a SIGTERM of its own.
  void terminate() override {
    pid_t target = pid_;
    if (sandboxed_) {
      long inner = 0, launcher = 0;
      for_each_process([&](long pid, long ppid, long) { if (ppid == pid_) inner = pid; });
      if (inner > 0) for_each_process([&](long pid, long ppid, long) { if (ppid == inner) launcher = pid; });
      if (launcher > 0) target = static_cast<pid_t>(launcher);
    }
    ::kill(target, SIGTERM);
  }
  void kill() override {
    if (!code_) ::kill(pid_, SIGKILL);
    signal_session(pid_, SIGKILL);
  }

 private:
  std::unique_ptr<MemoryCgroup> memory_;  // declared first: removed after the job's processes are gone
  bool sandboxed_ = false;
  pid_t pid_ = -1;
  std::optional<int> code_;
};

}  // namespace

std::unique_ptr<Execution> start_local(const LaunchRequest& request) {
  return std::make_unique<LocalExecution>(request);
}

std::string sandbox_program(std::string* why) {
  for (const char* path : {"/usr/bin/bwrap", "/usr/local/bin/bwrap"}) {
    if (::access(path, X_OK) != 0) continue;
    // It must work here too: a container may forbid the namespaces it makes.
    const auto [rc, output] = run_program({path, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
                                           "--unshare-pid", "--", "true"});
    if (rc == 0) return path;
    *why = std::string(path) + " cannot make a sandbox here: " + output.substr(0, output.find('\n'));
    return "";
  }
  *why = "bubblewrap is not installed (apt-get install bubblewrap)";
  return "";
}

std::pair<int, std::string> run_program(const std::vector<std::string>& argv, const std::vector<std::string>* env) {
  int out[2];
  KILN_CHECK(::pipe2(out, O_CLOEXEC) == 0, "cannot run ", argv.at(0), ": pipe failed: ", std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out[1], 2);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> args = argv, environment = env ? *env : environment_with({});
  std::vector<char*> argp = pointers(args), envp = pointers(environment);
  pid_t pid = -1;
  // As for a job: the studio's blocked SIGTERM is not the program's.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, stopping;
  sigemptyset(&none);
  sigemptyset(&stopping);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE}) sigaddset(&stopping, sig);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &stopping);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const int rc = ::posix_spawnp(&pid, argp[0], &actions, &attributes, argp.data(), envp.data());
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    KILN_FAIL("cannot run ", argv[0], ": ", std::strerror(rc), " (is it installed and on the PATH?)");
  }
  std::string output;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    output.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {status_code(status), output};
}

}  // namespace kiln::studio

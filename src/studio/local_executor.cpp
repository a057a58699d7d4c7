// The local executor: the launcher as a child process of the studio, in a
// process group of its own so that stopping it reaches every rank.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"
#include "studio/executors.h"

extern char** environ;

namespace kiln::studio {

std::vector<std::string> environment_with(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    if (!extra.count(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (auto& [k, v] : extra) out.push_back(k + "=" + v);
  return out;
}

namespace {

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int status_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

class LocalExecution final : public Execution {
 public:
  explicit LocalExecution(const LaunchRequest& r) {
    // Everything the child needs is built before fork: between fork and exec
    // a child of a threaded process may only make system calls.
    KILN_CHECK(r.nnodes == 1, "the local executor runs a job on this machine only; nnodes ", r.nnodes,
               " needs the Slurm executor (kiln studio serve --executor slurm)");
    std::vector<std::string> argv = r.launcher, environment = environment_with(r.env);
    argv.push_back("--");
    argv.insert(argv.end(), r.command.begin(), r.command.end());
    std::vector<char*> args = pointers(argv), envp = pointers(environment);
    const std::string log_path = r.log_path, workdir = r.workdir;
    pid_ = ::fork();
    KILN_CHECK(pid_ >= 0, "cannot start the job: fork failed: ", std::strerror(errno));
    if (pid_ == 0) {
      ::setpgid(0, 0);  // the job's own process group: stopping it reaches every rank
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
    ::setpgid(pid_, pid_);
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
      ::kill(-pid_, SIGKILL);  // nothing of the job outlives it
    }
    return code_;
  }
  void terminate() override { ::kill(pid_, SIGTERM); }
  void kill() override { ::kill(-pid_, SIGKILL); }

 private:
  pid_t pid_ = -1;
  std::optional<int> code_;
};

}  // namespace

std::unique_ptr<Execution> start_local(const LaunchRequest& request) {
  return std::make_unique<LocalExecution>(request);
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
  const int rc = ::posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
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

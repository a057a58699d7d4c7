// The Slurm executor: the launcher as a batch job (sbatch), its state read
// with squeue while Slurm holds it and with scontrol once it is over, stopped
// with scancel. The batch script records the launcher's exit status in the
// job's folder too, for when Slurm has already forgotten the job.
#include <chrono>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "kiln/error.h"
#include "studio/executors.h"

namespace kiln::studio {
namespace {

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

// Slurm's reason for a pending job (squeue's %r), with what it means for
// the job: some clear by themselves, some never do.
std::string explain_pending(const std::string& reason) {
  static const std::pair<const char*, const char*> kKnown[] = {
      {"Resources", "the nodes it needs are busy; it starts when they free"},
      {"Priority", "jobs ahead of it in the queue go first"},
      {"Dependency", "it waits for another job"},
      {"BeginTime", "it may not start before its begin time"},
      {"PartitionTimeLimit", "it asks for more time than the partition allows, so it never starts: stop it and "
                             "lower time_limit_s"},
      {"PartitionNodeLimit", "it asks for more nodes than the partition has or allows, so it never starts: stop it "
                             "and lower nnodes"},
      {"ReqNodeNotAvail", "a node it needs is down or drained; it starts when an administrator brings it back"},
      {"PartitionDown", "the partition is down"},
      {"PartitionInactive", "the partition is inactive"},
      {"JobHeldAdmin", "an administrator holds it (scontrol release)"},
      {"JobHeldUser", "it is held (scontrol release)"},
  };
  for (const auto& [name, meaning] : kKnown)
    if (reason.rfind(name, 0) == 0) return reason + ": " + meaning;
  return reason;
}

// The value of KEY=VALUE in `scontrol show job -o` output.
std::string field(const std::string& record, const std::string& key) {
  std::smatch m;
  if (std::regex_search(record, m, std::regex("(^|\\s)" + key + "=(\\S*)"))) return m[2];
  return "";
}

class SlurmExecution final : public Execution {
 public:
  SlurmExecution(std::string id, std::string job_dir) : id_(std::move(id)), job_dir_(std::move(job_dir)) {}

  std::optional<int> poll() override {
    if (code_) return code_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_poll_ < std::chrono::milliseconds(500)) return std::nullopt;  // Slurm is asked twice a second at most
    last_poll_ = now;
    auto [rc, out] = run_program({"squeue", "-h", "-j", id_, "-o", "%T|%r"});
    const std::string line = trimmed(out);
    const std::string state = line.substr(0, line.find('|'));
    if (rc == 0 && !state.empty()) {
      queued_ = state == "PENDING" || state == "CONFIGURING";
      const std::string reason = line.find('|') == std::string::npos ? "" : trimmed(line.substr(line.find('|') + 1));
      reason_ = queued_ && !reason.empty() && reason != "None" ? explain_pending(reason) : "";
      return std::nullopt;
    }
    // Over (or forgotten): how it ended.
    auto [show_rc, record] = run_program({"scontrol", "show", "job", "-o", id_});
    const std::string job_state = show_rc == 0 ? field(record, "JobState") : "";
    if (job_state == "PENDING" || job_state == "RUNNING" || job_state == "COMPLETING" || job_state == "CONFIGURING")
      return std::nullopt;  // squeue and scontrol disagreed for a moment
    if (!job_state.empty() && job_state != "COMPLETED" && job_state != "FAILED")
      ended_because_ = "Slurm ended it: " + job_state +
                       (job_state == "TIMEOUT"         ? " (it ran past its time limit)"
                        : job_state == "CANCELLED"     ? " (scancel, or an administrator)"
                        : job_state == "NODE_FAIL"     ? " (its node failed)"
                        : job_state == "OUT_OF_MEMORY" ? " (out of memory)"
                                                       : "");
    std::ifstream recorded(job_dir_ + "/exit_code");
    int code = -1;
    if (recorded >> code) {
      code_ = code;
    } else if (!job_state.empty()) {
      // ExitCode=STATUS:SIGNAL of the batch script.
      const std::string exit = field(record, "ExitCode");
      const int status = std::atoi(exit.c_str()), signal = std::atoi(exit.substr(exit.find(':') + 1).c_str());
      code_ = signal ? 128 + signal : (status ? status : 1);
    } else {
      ended_because_ = "Slurm no longer knows job " + id_ + " and it left no exit status in " + job_dir_;
      code_ = 1;
    }
    return code_;
  }
  bool queued() override { return queued_; }
  std::string queue_reason() override { return reason_; }
  void terminate() override {
    if (queued_) run_program({"scancel", id_});  // nothing runs yet: take it out of the queue
    else run_program({"scancel", "--signal=TERM", "--full", id_});
  }
  void kill() override { run_program({"scancel", id_}); }
  std::string ended_because() override { return ended_because_; }
  std::string external_id() const override { return id_; }

 private:
  std::string id_, job_dir_, ended_because_, reason_;
  std::optional<int> code_;
  bool queued_ = true;
  std::chrono::steady_clock::time_point last_poll_{};
};

}  // namespace

std::unique_ptr<Execution> start_slurm(const LaunchRequest& r, const std::string& partition) {
  // The launcher as one node runs it; with several nodes, each gets its place
  // from srun and finds rank 0's store on the first node.
  std::string launch;
  for (const auto& a : r.launcher) {
    launch += shell_quoted(a);
    launch += ' ';
  }
  if (r.nnodes > 1) launch += "--nnodes \"$SLURM_NNODES\" --node-rank \"$SLURM_NODEID\" --master \"$KILN_MASTER\" ";
  launch += "--";
  for (const auto& a : r.command) {
    launch += ' ';
    launch += shell_quoted(a);
  }
  std::ostringstream script;
  script << "#!/bin/bash\n"
         << "#SBATCH --job-name=" << shell_quoted("kiln-" + r.name) << "\n"
         << "#SBATCH --output=" << r.log_path << "\n"
         << "#SBATCH --nodes=" << r.nnodes << "\n#SBATCH --ntasks-per-node=1\n";
  if (r.time_limit_s > 0) script << "#SBATCH --time=" << static_cast<long>(std::ceil(r.time_limit_s / 60)) << "\n";
  // The job's spec, per node: Slurm queues it until a node has them.
  if (r.resources.cpus > 0) script << "#SBATCH --cpus-per-task=" << r.resources.cpus << "\n";
  if (r.resources.memory_mb > 0) script << "#SBATCH --mem=" << r.resources.memory_mb << "M\n";
  if (r.resources.gpus > 0) script << "#SBATCH --gres=gpu:" << r.resources.gpus << "\n";
  if (!partition.empty()) script << "#SBATCH --partition=" << partition << "\n";
  script << "cd " << shell_quoted(r.workdir) << " || exit 126\n";
  if (r.nnodes == 1) {
    script << launch << " < /dev/null\n";
  } else {
    const std::string node_script = r.job_dir + "/slurm-node.sh";
    std::ofstream(node_script) << "#!/bin/bash\ncd " << shell_quoted(r.workdir) << " || exit 126\nexec " << launch
                               << " < /dev/null\n";
    script << "first=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
           << "address=$(scontrol show node \"$first\" -o | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)\n"
           << "export KILN_MASTER=\"${address:-$first}:$((29500 + SLURM_JOB_ID % 1000))\"\n"
           << "srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash " << shell_quoted(node_script) << "\n";
  }
  script << "code=$?\necho $code > " << shell_quoted(r.job_dir + "/exit_code") << "\nexit $code\n";
  const std::string path = r.job_dir + "/slurm.sh";
  std::ofstream(path) << script.str();
  const std::vector<std::string> env = environment_with(r.env);
  // The batch job gets this environment (--export=ALL): the job's variables reach the ranks.
  auto [rc, out] = run_program({"sbatch", "--parsable", "--export=ALL", path}, &env);
  const std::string id = trimmed(out.substr(0, out.find(';')));
  KILN_CHECK(rc == 0 && !id.empty() && id.find_first_not_of("0123456789") == std::string::npos,
             "Slurm refused the job: sbatch said: ", trimmed(out),
             "; check that slurmctld runs and SLURM_CONF names its configuration (sinfo shows the partitions)");
  return std::make_unique<SlurmExecution>(id, r.job_dir);
}

std::unique_ptr<Execution> attach_slurm(const std::string& slurm_job_id, const std::string& job_dir) {
  return std::make_unique<SlurmExecution>(slurm_job_id, job_dir);
}

}  // namespace kiln::studio

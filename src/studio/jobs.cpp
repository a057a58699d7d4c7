#include "studio/jobs.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/error.h"
#include "studio/executors.h"
#include "studio/folder_sync.h"
#include "studio/job_queue.h"
#include "studio/projects.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace fs = std::filesystem;
using json = nlohmann::json;

struct Jobs::Running {
  std::atomic<bool> stop{false};
  std::atomic<bool> studio_stopping{false};
};

json JobRecord::json() const {
  // A job's environment may hold secrets: answers name the variables, never their values.
  nlohmann::json shown = job_spec_json(spec);
  for (auto& [name, value] : shown["env"].items()) value = "********";
  nlohmann::json j = {{"id", id}, {"name", spec.name}, {"state", state}, {"stage", stage}, {"reason", reason},
                      {"submitted_by", submitted_by}, {"created_ms", created_ms}, {"started_ms", started_ms},
                      {"ended_ms", ended_ms}, {"spec", shown}, {"executor", executor},
                      {"stage_times", stages}, {"project", spec.project}};
  if (!external_id.empty()) j["external_id"] = external_id;
  j["exit_code"] = exit_code >= 0 ? nlohmann::json(exit_code) : nlohmann::json(nullptr);
  return j;
}

namespace {

const char* kSelect =
    "SELECT id, spec, state, stage, reason, submitted_by, exit_code, created_at, started_at, ended_at, executor, "
    "external_id, stages FROM jobs";

JobRecord record_of(Statement& s) {
  JobRecord r;
  r.id = s.integer(0);
  r.spec = parse_job_spec(json::parse(s.text(1)));
  r.state = s.text(2);
  r.stage = s.text(3);
  r.reason = s.text(4);
  r.submitted_by = s.text(5);
  r.exit_code = s.is_null(6) ? -1 : static_cast<int>(s.integer(6));
  r.created_ms = s.integer(7);
  r.started_ms = s.is_null(8) ? 0 : s.integer(8);
  r.ended_ms = s.is_null(9) ? 0 : s.integer(9);
  r.executor = s.text(10);
  r.external_id = s.text(11);
  r.stages = json::parse(s.text(12));
  return r;
}

// Why the launcher failed, from its report ("kiln launch: rank 1 (pid ..)
// was killed by signal 9 ..."), with what a person should suspect.
std::string failure_reason(const std::string& launcher_log, int exit_code) {
  std::istringstream lines(launcher_log);
  std::string line, reason;
  while (std::getline(lines, line))
    if (line.rfind("kiln launch: rank ", 0) == 0) {
      reason = line.substr(std::string("kiln launch: ").size());
      size_t cut = reason.find(". Its last lines");
      if (cut != std::string::npos) reason = reason.substr(0, cut + 1);
    } else if (reason.empty() && line.rfind("kiln: error: ", 0) == 0) {
      reason = line.substr(std::string("kiln: error: ").size());
    }
  if (reason.empty()) reason = "the launcher exited with status " + std::to_string(exit_code);
  if (exit_code == 137 || reason.find("signal 9") != std::string::npos)
    reason += " (killed: probably out of memory, or stopped from outside)";
  return reason;
}

}  // namespace

Jobs::Jobs(std::string root, Database& db, ObjectStore& store, std::string kiln, std::string executor,
           std::string slurm_partition, Capacity capacity, const std::string& sandbox, std::string data_dir)
    : root_(std::move(root)), db_(db), store_(store), kiln_(std::move(kiln)), executor_(std::move(executor)),
      slurm_partition_(std::move(slurm_partition)), queue_(capacity), data_dir_(std::move(data_dir)) {
  KILN_CHECK(executor_ == "local" || executor_ == "slurm", "the job executor is local or slurm, not '", executor_, "'");
  KILN_CHECK(sandbox == "auto" || sandbox == "bwrap" || sandbox == "off", "the sandbox is auto, bwrap or off, not '",
             sandbox, "'");
  if (executor_ == "local" && sandbox != "off") {
    std::string why;
    bwrap_ = sandbox_program(&why);
    KILN_CHECK(!bwrap_.empty() || sandbox == "auto", "--sandbox bwrap: ", why);
    if (bwrap_.empty())
      std::fprintf(stderr, "kiln studio: jobs run without a sandbox (%s); they can read the studio's data\n", why.c_str());
  }
  if (executor_ == "slurm") {  // Slurm's tools wait a minute for a missing configuration: say so at once
    const char* conf = std::getenv("SLURM_CONF");
    const std::string path = conf && *conf ? conf : "/etc/slurm/slurm.conf";
    KILN_CHECK(fs::exists(path), "--executor slurm: no Slurm configuration at ", path,
               "; set SLURM_CONF to the cluster's slurm.conf (sinfo must work on this machine)");
  }
  fs::create_directories(root_);
  {
    Statement quotas(db_, "SELECT name, quota_cpus, quota_memory_mb, quota_gpus FROM projects");
    while (quotas.step())
      queue_.set_quota(quotas.text(0), {static_cast<int>(quotas.integer(1)), quotas.integer(2),
                                        static_cast<int>(quotas.integer(3))});
  }
  // Jobs the last studio process left to Slurm go on: watch them again.
  std::vector<std::pair<int64_t, std::string>> queued;
  {
    Statement s(db_, "SELECT id, external_id FROM jobs WHERE executor = 'slurm' AND external_id IS NOT NULL AND "
                     "state IN ('Pending', 'Running', 'Terminating')");
    while (s.step()) queued.emplace_back(s.integer(0), s.text(1));
  }
  // Those it ran itself: their ranks went with it.
  Statement(db_,
            "UPDATE jobs SET state = 'Abnormal', stage = 'end', ended_at = ?, reason = 'the studio stopped while the "
            "job was ' || lower(state) || '; its logs and the output synced until then are kept' "
            "WHERE state IN ('Creating', 'Pending', 'Running', 'Terminating') AND "
            "NOT (executor = 'slurm' AND external_id IS NOT NULL AND state <> 'Creating')")
      .bind(1, now_ms())
      .run();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, slurm_id] : queued) {
    auto running = std::make_shared<Running>();
    running_[id] = running;
    threads_.emplace(id, std::thread([this, id, running, slurm_id = slurm_id] { adopt(id, running, slurm_id); }));
  }
}

Jobs::~Jobs() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, r] : running_) {
      r->studio_stopping = true;
      r->stop = true;
    }
  }
  for (auto& [id, t] : threads_) t.join();
}

int64_t Jobs::submit(const JobSpec& spec, const std::string& submitted_by) {
  // What will be staged, by the spec key that names it.
  std::map<std::string, std::string> staged;
  for (auto& [name, url] : spec.inputs) staged["inputs." + name] = url;
  if (!spec.code.empty()) staged["code"] = spec.code;
  for (auto& [what, url] : staged) {
    auto [bucket, prefix] = split_store_url(url, what);
    bool found = false;
    try {
      found = !store_.list(bucket, prefix, "", 1).objects.empty();
    } catch (const NotFound& e) {
      KILN_FAIL(what, ": ", e.what());  // a bad spec (400), not a missing endpoint
    }
    KILN_CHECK(found, what, ": nothing in the store under ", url, "; upload it first (kiln store cp DIR ", url, ")");
  }
  KILN_CHECK(spec.nnodes == 1 || executor_ == "slurm", "nnodes ", spec.nnodes,
             " needs the Slurm executor (kiln studio serve --executor slurm); this studio runs jobs on its own machine");
  if (executor_ == "local") queue_.check_fits(spec);  // Slurm judges its own cluster
  KILN_CHECK(project_exists(db_, spec.project), "job spec: no project '", spec.project,
             "' (an operator makes one: kiln studio project create ", spec.project, ")");
  // The project's secrets the job names join its environment's values.
  std::map<std::string, std::string> values = spec.env;
  for (const std::string& name : spec.secrets) {
    KILN_CHECK(!spec.env.count(name), "job spec: '", name, "' is both in env and in secrets; give it once");
    Statement secret(db_, "SELECT value FROM project_secrets WHERE project = ? AND name = ?");
    secret.bind(1, spec.project).bind(2, name);
    KILN_CHECK(secret.step(), "job spec: project '", spec.project, "' has no secret '", name,
               "' (a project admin sets it: kiln project secret set ", spec.project, " ", name, ")");
    values[name] = secret.text(0);
  }
  int64_t id = 0;
  {
    // The spec keeps the environment's names; their values go to job_env.
    JobSpec stored = spec;
    for (auto& [name, value] : stored.env) value.clear();
    Transaction t(db_);
    {
      Statement insert(db_, "INSERT INTO jobs (spec, state, stage, reason, submitted_by, created_at, stages, project) "
                            "VALUES (?, 'Creating', 'scheduling', '', ?, ?, ?, ?) RETURNING id");
      const int64_t now = now_ms();
      insert.bind(1, job_spec_json(stored).dump()).bind(2, submitted_by).bind(3, now)
          .bind(4, json{{"scheduling", now}}.dump()).bind(5, spec.project);
      KILN_CHECK(insert.step(), "studio database: a new job has no id");
      id = insert.integer(0);
    }
    for (const auto& [name, value] : values)
      Statement(db_, "INSERT INTO job_env (job_id, name, value) VALUES (?, ?, ?)").bind(1, id).bind(2, name).bind(3, value).run();
    t.commit();
  }
  auto running = std::make_shared<Running>();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = threads_.begin(); it != threads_.end();) {  // the threads of jobs that are over
    if (running_.count(it->first)) {
      ++it;
    } else {
      it->second.join();
      it = threads_.erase(it);
    }
  }
  running_[id] = running;
  if (executor_ == "local") queue_.enqueue(id, spec);  // its place in the queue is its submission's
  threads_.emplace(id, std::thread([this, id, running] { run(id, running); }));
  return id;
}

JobSpec Jobs::spec_of(int64_t id) {
  auto record = get(id);
  if (!record) throw NotFound("no job " + std::to_string(id));
  JobSpec spec = record->spec;
  Statement s(db_, "SELECT name, value FROM job_env WHERE job_id = ?");
  s.bind(1, id);
  while (s.step()) spec.env[s.text(0)] = s.text(1);  // jobs from before job_env keep theirs in the spec
  return spec;
}

void Jobs::set_quota(const std::string& project, const Capacity& quota) {
  KILN_CHECK(quota.cpus >= 0 && quota.memory_mb >= 0 && quota.gpus >= 0, "a quota is zero (no limit) or more");
  KILN_CHECK(Statement(db_, "UPDATE projects SET quota_cpus = ?, quota_memory_mb = ?, quota_gpus = ? WHERE name = ?")
                     .bind(1, int64_t{quota.cpus}).bind(2, quota.memory_mb).bind(3, int64_t{quota.gpus}).bind(4, project)
                     .run() == 1,
             "no project '", project, "'");
  queue_.set_quota(project, quota);
}

int64_t Jobs::retry(int64_t id, const std::string& submitted_by) {
  JobSpec spec = spec_of(id);
  for (const std::string& name : spec.secrets) spec.env.erase(name);  // read again: their values of now
  return submit(spec, submitted_by);
}

std::optional<JobRecord> Jobs::get(int64_t id) {
  Statement s(db_, std::string(kSelect) + " WHERE id = ?");
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return record_of(s);
}

std::vector<JobRecord> Jobs::list(int limit) {
  Statement s(db_, std::string(kSelect) + " ORDER BY id DESC LIMIT ?");
  s.bind(1, int64_t{limit});
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(record_of(s));
  return out;
}

void Jobs::stop(int64_t id) {
  auto job = get(id);
  if (!job) throw NotFound("no job " + std::to_string(id));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(id);
  KILN_CHECK(it != running_.end(), "job ", id, " is ", job->state, ", not running; there is nothing to stop");
  it->second->stop = true;
}

void Jobs::enter_stage(int64_t id, const std::string& stage) {
  Transaction t(db_);
  json stages = json::object();
  {
    Statement s(db_, "SELECT stages FROM jobs WHERE id = ?");
    s.bind(1, id);
    if (s.step()) stages = json::parse(s.text(0));
  }
  if (stages.contains(stage)) return;  // the first time it entered counts
  stages[stage] = now_ms();
  Statement(db_, "UPDATE jobs SET stages = ? WHERE id = ?").bind(1, stages.dump()).bind(2, id).run();
  t.commit();
}

void Jobs::set_state(int64_t id, const std::string& state, const std::string& stage, const std::string& reason) {
  enter_stage(id, stage);
  Statement(db_, "UPDATE jobs SET state = ?, stage = ?, reason = ?, started_at = CASE WHEN ? = 'Running' AND "
                 "started_at IS NULL THEN ? ELSE started_at END WHERE id = ?")
      .bind(1, state).bind(2, stage).bind(3, reason).bind(4, state).bind(5, now_ms()).bind(6, id)
      .run();
}

void Jobs::finish(int64_t id, const std::string& state, const std::string& reason, int exit_code) {
  enter_stage(id, "end");
  Statement s(db_, "UPDATE jobs SET state = ?, stage = 'end', reason = ?, exit_code = ?, ended_at = ? WHERE id = ?");
  s.bind(1, state).bind(2, reason);
  if (exit_code >= 0) s.bind(3, int64_t{exit_code});
  else s.bind_null(3);
  s.bind(4, now_ms()).bind(5, id).run();
}

void Jobs::stage(const std::string& url, const std::string& what, const std::string& dir) {
  auto [bucket, prefix] = split_store_url(url, what);
  copy_store_to_folder(store_, bucket, prefix, dir, url);
}

void Jobs::stage_inputs(int64_t id, const JobSpec& spec) {
  for (auto& [name, url] : spec.inputs) stage(url, "inputs." + name, folder(id) + "/inputs/" + name);
  if (!spec.code.empty()) stage(spec.code, "code", folder(id) + "/code");
}

void Jobs::sync_output(int64_t id, const JobSpec& spec, Synced& synced) {
  if (spec.output.empty()) return;
  auto [bucket, prefix] = split_store_url(spec.output, "output");
  if (!prefix.empty() && prefix.back() != '/') prefix += "/";
  store_.create_bucket(bucket, spec.project);
  // The output directory as it is, and the ranks' logs under logs/.
  copy_folder_to_store(store_, folder(id) + "/output", bucket, prefix, synced);
  copy_folder_to_store(store_, folder(id) + "/logs", bucket, prefix + "logs/", synced);
}

void Jobs::end_job(int64_t id, const JobSpec& spec, Synced& synced, const std::string& state,
                   const std::string& reason, int code) {
  try {
    sync_output(id, spec, synced);
  } catch (const std::exception& e) {
    finish(id, "Failed", reason + "; and its output could not be synced to the store: " + e.what(), code);
    return;
  }
  finish(id, state, reason, code);
}

// Watches an execution to its end: stops it when asked or past its time
// limit, syncs the output while it runs, and records how it ended.
bool Jobs::monitor(int64_t id, const JobSpec& spec, Execution& execution, Running& running, Synced& synced) {
  using clock = std::chrono::steady_clock;
  const auto started = clock::now();
  auto next_sync = started + std::chrono::duration<double>(spec.sync_every_s);
  std::optional<clock::time_point> killed_at;
  std::string stop_reason;
  std::optional<bool> queued;  // as the job's state shows it
  std::string queue_reason;    // Slurm's, as the job's reason shows it
  std::optional<int> code;
  while (!(code = execution.poll())) {
    const auto now = clock::now();
    if (running.studio_stopping && !execution.external_id().empty()) return false;  // Slurm keeps it; the next studio finds it
    if (stop_reason.empty() && (execution.queued() != queued || (*queued && execution.queue_reason() != queue_reason))) {
      queued = execution.queued();
      queue_reason = *queued ? execution.queue_reason() : "";
      set_state(id, *queued ? "Pending" : "Running", *queued ? "scheduling" : "running",
                *queued ? "waiting in Slurm's queue" + (queue_reason.empty() ? "" : " (Slurm's reason: " + queue_reason + ")")
                        : "");
    }
    if (stop_reason.empty() && running.stop) {
      stop_reason = running.studio_stopping ? "the studio was stopped while the job ran" : "stopped on request";
      if (!running.studio_stopping) set_state(id, "Terminating", "running", stop_reason);
    }
    if (stop_reason.empty() && spec.time_limit_s > 0 && now - started > std::chrono::duration<double>(spec.time_limit_s))
      stop_reason = "ran past its time limit of " + std::to_string(static_cast<int64_t>(spec.time_limit_s)) + " s";
    if (!stop_reason.empty() && !killed_at) {
      execution.terminate();
      killed_at = now;
    }
    if (killed_at && now - *killed_at > std::chrono::seconds(15)) execution.kill();
    if (now > next_sync) {
      try {
        sync_output(id, spec, synced);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "kiln studio: job %lld: syncing its output failed (will retry): %s\n",
                     static_cast<long long>(id), e.what());
      }
      next_sync = now + std::chrono::duration<double>(spec.sync_every_s);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  execution.kill();  // nothing of the job outlives it
  if (running.studio_stopping) {
    end_job(id, spec, synced, "Abnormal", stop_reason, *code);
  } else if (!stop_reason.empty()) {
    end_job(id, spec, synced, stop_reason == "stopped on request" ? "Terminated" : "Failed", stop_reason, *code);
  } else if (*code == 0) {
    end_job(id, spec, synced, "Completed", "", 0);
  } else if (!execution.ended_because().empty()) {
    end_job(id, spec, synced, "Failed", execution.ended_because(), *code);
  } else {
    end_job(id, spec, synced, "Failed", failure_reason(read_text(folder(id) + "/launcher.log"), *code), *code);
  }
  return true;
}

void Jobs::run(int64_t id, std::shared_ptr<Running> running) {
  JobSpec spec = spec_of(id);
  const std::string dir = folder(id);
  Synced synced;
  bool over = true;
  try {
    set_state(id, "Pending", "scheduling");
    fs::create_directories(dir + "/output");
    fs::create_directories(dir + "/logs");
    // The local executor runs a job once its cores, memory and GPUs are free.
    std::optional<JobQueue::Grant> grant;
    if (executor_ == "local") {
      grant = queue_.acquire(
          id, spec, [&] { return running->stop.load() || running->studio_stopping.load(); },
          [&](const std::string& why) { set_state(id, "Pending", "queued", why); });
      if (!grant) {
        end_job(id, spec, synced, running->studio_stopping ? "Abnormal" : "Terminated",
                "stopped while waiting in the queue", -1);
        finish_run(id, true);
        return;
      }
    }
    struct Release {
      JobQueue& queue;
      int64_t id;
      const std::optional<JobQueue::Grant>& grant;
      ~Release() {
        if (grant) queue.release(id, *grant);
      }
    } release{queue_, id, grant};
    set_state(id, "Running", "preparing");
    stage_inputs(id, spec);
    // Under Slurm it waits for the queue; the monitor says when it runs.
    if (executor_ == "slurm") set_state(id, "Pending", "scheduling", "submitting to Slurm");
    else set_state(id, "Running", "running");

    std::vector<std::string> command;
    std::string data_url = spec.inputs.size() == 1 ? dir + "/inputs/" + spec.inputs.begin()->first : dir + "/inputs";
    if (!spec.recipe.empty()) {
      // A recipe the sandbox would hide (in the studio's data) is read from a copy in the job's folder.
      std::string recipe = spec.recipe;
      if (!bwrap_.empty() && !data_dir_.empty() &&
          fs::weakly_canonical(recipe).string().rfind(fs::weakly_canonical(data_dir_).string() + "/", 0) == 0) {
        std::error_code ec;
        fs::copy_file(recipe, dir + "/recipe.yaml", fs::copy_options::overwrite_existing, ec);
        if (!ec) recipe = dir + "/recipe.yaml";
      }
      command = {kiln_, "train", recipe, "--output", dir + "/output"};
      if (!spec.inputs.empty()) command.insert(command.end(), {"--data", data_url});
    } else {
      command = spec.command;
      command.insert(command.end(), {"--data_url", data_url, "--train_url", dir + "/output"});
    }
    std::map<std::string, std::string> env = spec.env;
    env["KILN_DATA_URL"] = data_url;
    env["KILN_TRAIN_URL"] = dir + "/output";
    env["KILN_JOB_ID"] = std::to_string(id);
    if (!studio_url_.empty()) {
      env["KILN_STUDIO_URL"] = studio_url_;
      env["KILN_STUDIO_TOKEN"] = create_token(db_, "job-" + std::to_string(id), Scope::Write);
    }

    LaunchRequest request;
    request.launcher = {kiln_, "launch", "-n", std::to_string(spec.nproc), "--log-dir", dir + "/logs"};
    request.command = std::move(command);
    request.nnodes = spec.nnodes;
    request.env = std::move(env);
    request.name = spec.name;
    request.job_dir = dir;
    request.workdir = spec.code.empty() ? dir : dir + "/code";  // the ranks run in the job's code
    request.log_path = dir + "/launcher.log";
    request.time_limit_s = spec.time_limit_s;
    if (!bwrap_.empty()) {
      request.sandbox = bwrap_;
      request.hidden = {data_dir_.empty() ? root_ : data_dir_};
    }
    request.resources = spec.resources;
    request.resources.cpus = spec.cores();
    if (grant) {
      request.cpu_slots = grant->cpus;
      std::string gpus;
      for (int g : grant->gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
      request.env["CUDA_VISIBLE_DEVICES"] = gpus;  // its GPUs only (none: none visible)
      // The ranks share the job's cores.
      if (!request.env.count("OMP_NUM_THREADS"))
        request.env["OMP_NUM_THREADS"] = std::to_string(std::max(1, spec.cores() / spec.nproc));
    }
    std::unique_ptr<Execution> execution =
        executor_ == "slurm" ? start_slurm(request, slurm_partition_) : start_local(request);
    if (!execution->external_id().empty())
      Statement(db_, "UPDATE jobs SET executor = ?, external_id = ? WHERE id = ?")
          .bind(1, executor_).bind(2, execution->external_id()).bind(3, id)
          .run();
    over = monitor(id, spec, *execution, *running, synced);
  } catch (const std::exception& e) {
    end_job(id, spec, synced, "Failed", e.what(), -1);
  }
  finish_run(id, over);
}

void Jobs::adopt(int64_t id, std::shared_ptr<Running> running, const std::string& slurm_id) {
  JobSpec spec = spec_of(id);
  Synced synced;
  bool over = true;
  try {
    auto execution = attach_slurm(slurm_id, folder(id));
    over = monitor(id, spec, *execution, *running, synced);
  } catch (const std::exception& e) {
    end_job(id, spec, synced, "Failed", e.what(), -1);
  }
  finish_run(id, over);
}

void Jobs::finish_run(int64_t id, bool over) {
  queue_.forget(id);  // a job that ended before its turn (an error while staging) holds no place
  if (over) revoke_tokens(db_, "job-" + std::to_string(id));  // a job Slurm still runs keeps its token
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(id);
}

}  // namespace kiln::studio

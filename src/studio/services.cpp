#include "studio/services.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "core/child_process.h"
#include "studio/job_spec.h"
#include "studio/projects.h"
#include "studio/runs.h"
#include "studio/service_state.h"
#include "studio/tokens.h"

namespace kiln::studio {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kMaxStartFailures = 3;
// A ready instance is probed this often; one that has failed its probes this
// long (unloaded, frozen) is killed and started again.
constexpr int64_t kProbeEveryMs = 1000;
constexpr int64_t kRestartUnreadyAfterMs = 10000;
// A ready instance answers an inference this often, besides its ready endpoint.
constexpr int64_t kInferEveryMs = 5000;


std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

int int_field(const json& j, const char* key, int fallback, int lo, int hi) {
  if (!j.contains(key)) return fallback;
  KILN_CHECK(j[key].is_number_integer(), "\"", key, "\" must be a whole number");
  int v = j[key].get<int>();
  KILN_CHECK(v >= lo && v <= hi, "\"", key, "\" must be from ", lo, " to ", hi, ", not ", v);
  return v;
}

double number_field(const json& j, const char* key, double fallback, double lo, double hi) {
  if (!j.contains(key)) return fallback;
  KILN_CHECK(j[key].is_number(), "\"", key, "\" must be a number");
  const double v = j[key].get<double>();
  KILN_CHECK(v >= lo && v <= hi, "\"", key, "\" must be from ", lo, " to ", hi, ", not ", v);
  return v;
}

// OIP's name of a dtype, as kiln serve takes it ("" where it has none).
std::string oip_datatype(const std::string& dtype) {
  static const std::map<std::string, std::string> names = {
      {"float32", "FP32"}, {"float64", "FP64"}, {"float16", "FP16"}, {"bfloat16", "BF16"}, {"int32", "INT32"},
      {"int64", "INT64"},  {"uint8", "UINT8"},  {"int8", "INT8"},    {"bool", "BOOL"}};
  auto it = names.find(dtype);
  return it == names.end() ? "" : it->second;
}

// An inference request of zeros from a model's signature (named, dynamic
// dimensions 1): what a probe sends. "" where an input's shape or type is
// not known, or the request would be large.
std::string probe_request(const json& signature) {
  json inputs = json::array();
  for (const auto& in : signature.value("inputs", json::array())) {
    const std::string datatype = oip_datatype(in.value("dtype", ""));
    if (datatype.empty() || !in["shape"].is_array()) return "";
    json shape = json::array();
    int64_t count = 1;
    for (const auto& d : in["shape"]) {
      const int64_t n = d.is_number_integer() && d.get<int64_t>() > 0 ? d.get<int64_t>() : 1;
      shape.push_back(n);
      count *= n;
    }
    if (count > (1 << 16)) return "";
    json data = json::array();
    for (int64_t k = 0; k < count; ++k) data.push_back(datatype == "BOOL" ? json(false) : json(0));
    inputs.push_back({{"name", in["name"]}, {"shape", shape}, {"datatype", datatype}, {"data", data}});
  }
  return inputs.empty() ? "" : json({{"inputs", inputs}}).dump();
}

}  // namespace

ServiceVersionSpec parse_service_version(const json& j, const ServiceVersionSpec& base) {
  KILN_CHECK(j.is_object(), "a service version is {\"model\": ..., \"weight\": ..., \"instances\": ...}");
  static const std::set<std::string> fields = {"name",          "model",         "weight",
                                               "instances",     "threads",       "max_batch",
                                               "min_instances", "max_instances", "target_outstanding",
                                               "target_latency_ms", "scale_down_after_s", "spec", "memory_mb"};
  for (auto& [k, v] : j.items())
    KILN_CHECK(fields.count(k), "unknown field '", k, "' of a service version (name, model, weight, instances, spec, "
               "threads, memory_mb, max_batch, min_instances, max_instances, target_outstanding, target_latency_ms, "
               "scale_down_after_s)");
  ServiceVersionSpec s = base;
  if (j.contains("name")) {
    KILN_CHECK(j["name"].is_string(), "a version's \"name\" is text");
    s.name = j["name"];
    check_model_name(s.name, "version name");
  }
  if (j.contains("model")) {
    KILN_CHECK(j["model"].is_string(), "\"model\" is a registry URI such as fmnist@production");
    s.model = j["model"];
  }
  KILN_CHECK(!s.model.empty(), "a service version needs \"model\": a registry URI such as fmnist@production");
  s.weight = int_field(j, "weight", s.weight, 0, 100);
  s.instances = int_field(j, "instances", s.instances, 1, 64);
  if (j.contains("spec")) {  // each instance's: a flavour's cores as its threads, and its memory as a limit
    const Resources r = parse_resources(j["spec"], "a service version's spec");
    KILN_CHECK(r.gpus == 0, "a service version's spec: instances run on CPU cores (a cpu-N flavour)");
    s.threads = std::max(1, r.cpus);
    s.memory_mb = r.memory_mb;
  }
  s.threads = int_field(j, "threads", s.threads, 1, 256);
  if (j.contains("memory_mb")) {
    KILN_CHECK(j["memory_mb"].is_number_integer() && j["memory_mb"].get<int64_t>() >= 0,
               "\"memory_mb\" is 0 (no limit) or more");
    s.memory_mb = j["memory_mb"];
  }
  s.max_batch = int_field(j, "max_batch", s.max_batch, 0, 4096);
  if (j.contains("min_instances") || j.contains("max_instances")) {
    s.min_instances = int_field(j, "min_instances", s.autoscaled() ? s.min_instances : 1, 1, 64);
    s.max_instances = int_field(j, "max_instances", s.autoscaled() ? s.max_instances : s.min_instances, 1, 64);
    KILN_CHECK(s.max_instances >= s.min_instances, "\"max_instances\" (", s.max_instances,
               ") must be at least \"min_instances\" (", s.min_instances, ")");
    if (!s.autoscaled()) s.min_instances = s.max_instances = 0;  // equal bounds: a fixed count
  }
  s.target_outstanding = number_field(j, "target_outstanding", s.target_outstanding, 0.1, 1e6);
  s.target_latency_ms = number_field(j, "target_latency_ms", s.target_latency_ms, 0, 1e6);
  s.scale_down_after_s = int_field(j, "scale_down_after_s", s.scale_down_after_s, 0, 86400);
  if (s.autoscaled()) {  // starts at its minimum unless told otherwise, and stays within its bounds
    if (!j.contains("instances") && (j.contains("min_instances") || j.contains("max_instances")))
      s.instances = s.min_instances;
    s.instances = std::clamp(s.instances, s.min_instances, s.max_instances);
  }
  return s;
}

namespace {

json version_json(const ServiceVersionSpec& v) {
  json j = {{"name", v.name},         {"model", v.model},        {"weight", v.weight},
            {"instances", v.instances}, {"threads", v.threads}, {"max_batch", v.max_batch}};
  if (v.memory_mb > 0) j["memory_mb"] = v.memory_mb;
  if (v.autoscaled())
    j.update({{"min_instances", v.min_instances},
              {"max_instances", v.max_instances},
              {"target_outstanding", v.target_outstanding},
              {"target_latency_ms", v.target_latency_ms},
              {"scale_down_after_s", v.scale_down_after_s}});
  return j;
}

}  // namespace

Services::Services(Database& db, Models& models, std::string kiln, std::string root)
    : db_(db), models_(models), kiln_(std::move(kiln)), root_(std::move(root)) {
  fs::create_directories(root_);
  // Services that were up when the studio stopped come back up.
  std::vector<std::pair<json, int64_t>> again;
  {
    Statement s(db_, "SELECT name, spec, created_at FROM services WHERE state NOT IN ('Stopped', 'Failed')");
    while (s.step()) again.emplace_back(json::parse(s.text(1)), s.integer(2));
  }
  for (auto& [spec, created] : again) {
    try {
      Statement(db_, "DELETE FROM services WHERE name = ?").bind(1, spec["name"].get<std::string>()).run();
      deploy(spec);
    } catch (const std::exception& e) {
      Statement(db_, "INSERT INTO services (name, spec, state, reason, created_at, project) "
                     "VALUES (?, ?, 'Failed', ?, ?, ?) ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, "
                     "state = excluded.state, reason = excluded.reason")
          .bind(1, spec["name"].get<std::string>()).bind(2, spec.dump())
          .bind(3, std::string("it could not be started again when the studio restarted: ") + e.what())
          .bind(4, created).bind(5, spec.value("project", std::string(kDefaultProject)))
          .run();
    }
  }
  supervisor_ = std::thread([this] { supervise(); });
}

Services::~Services() {
  stopping_ = true;
  wake_.notify_all();
  if (supervisor_.joinable()) supervisor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, s] : services_)
    for (auto* list : {&s->versions, &s->warming, &s->draining})
      for (auto& v : *list)
        for (auto& i : v->instances)
          if (i->pid > 0) {
            ::kill(i->pid, SIGTERM);
            ::waitpid(i->pid, nullptr, 0);
          }
}

std::shared_ptr<Services::Service> Services::find(const std::string& name) {
  auto it = services_.find(name);
  if (it == services_.end()) throw NotFound("no service '" + name + "' (`kiln service list` shows them)");
  return it->second;
}

std::shared_ptr<Services::Version> Services::start_version(Service& s, const ServiceVersionSpec& spec, int generation) {
  ModelVersion mv = models_.resolve(spec.model);
  if (mv.state != "READY")
    throw Conflict("model " + spec.model + " is version " + std::to_string(mv.version) + ", which is " + mv.state);
  auto v = std::make_shared<Version>();
  v->spec = spec;
  v->generation = generation;
  auto& stats = s.stats[spec.name];
  if (!stats) stats = std::make_shared<VersionStats>();
  v->stats = stats;
  v->model_name = mv.model;
  v->model_version = mv.version;
  v->probe = probe_request(mv.signature);
  const auto& inputs = mv.signature["inputs"];
  v->batch_axis = !inputs.empty() && inputs[0]["shape"].is_array() && !inputs[0]["shape"].empty() &&
                  inputs[0]["shape"][0].is_string();
  const std::string dir = root_ + "/" + s.name + "/" + spec.name + "-g" + std::to_string(generation);
  fs::remove_all(dir);
  v->repo = dir + "/repository";  // what kiln serve loads: the model under the service's name
  v->logs = dir + "/logs";
  // The instance serves it as the registry's version number: answers say
  // which version ran (model_version), not always "1".
  const std::string served = v->repo + "/" + s.name + "/" + std::to_string(mv.version);
  fs::create_directories(served);
  fs::create_directories(v->logs);
  v->secret = random_secret();
  {
    std::ofstream token(dir + "/token");
    token << v->secret << "\n";
  }
  fs::permissions(dir + "/token", fs::perms::owner_read | fs::perms::owner_write);
  { std::ofstream(served + "/model.onnx", std::ios::binary) << models_.file(mv); }
  {
    std::ofstream config(v->repo + "/" + s.name + "/config.yaml");
    if (v->batch_axis && spec.max_batch > 0)
      config << "max_batch_size: " << spec.max_batch << "\ndynamic_batching: {max_queue_delay_microseconds: 500}\n";
    else
      config << "max_batch_size: 0\n";
  }
  for (int k = 0; k < spec.instances; ++k) {
    auto i = std::make_shared<Instance>();
    i->id = next_instance_++;
    i->log = v->logs + "/instance-" + std::to_string(i->id) + ".log";
    v->instances.push_back(i);
  }
  return v;
}

void Services::start_instance(Service& s, Version& v, Instance& i) {
  std::vector<std::string> args = {kiln_, "serve", "--model-repository", v.repo, "--port", "0", "--access-log", "",
                                   "--auth-token-file", fs::path(v.repo).parent_path().string() + "/token"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("KILN_NUM_THREADS=", 0) != 0) env.push_back(*e);
  env.push_back("KILN_NUM_THREADS=" + std::to_string(v.spec.threads));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::error_code ec;
  i.log_from = fs::exists(i.log, ec) ? fs::file_size(i.log, ec) : 0;
  i.port = 0;
  i.ready = false;
  i.unready_since_ms = 0;
  i.model = s.name;
  i.secret = v.secret;
  i.probe = v.probe;
  i.inferred_ms = 0;
  i.memory.reset();
  if (v.spec.memory_mb > 0) {
    std::string why;
    i.memory = MemoryCgroup::create("kiln-service-" + s.name + "-" + std::to_string(i.id), v.spec.memory_mb, &why);
    if (!i.memory)
      std::fprintf(stderr, "kiln studio: service %s: instance %d's memory is not limited: %s\n", s.name.c_str(), i.id,
                   why.c_str());
  }
  const std::string procs = i.memory ? i.memory->procs_file() : "";
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  KILN_CHECK(pid >= 0, "cannot start an instance of service ", s.name, ": fork failed");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // an instance does not outlive its studio
    if (::getppid() != parent) ::_exit(1);
    if (!procs.empty() && !MemoryCgroup::join(procs.c_str())) ::_exit(125);
    kiln::detail::reset_signals_for_exec();  // drained with SIGTERM, which the studio blocks
    ::setpgid(0, 0);
    int fd = ::open(i.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  i.pid = pid;
}

json Services::deploy(const json& spec) {
  KILN_CHECK(spec.is_object() && spec.contains("name") && spec["name"].is_string() && spec.contains("versions") &&
                 spec["versions"].is_array() && !spec["versions"].empty(),
             "a service is {\"name\": ..., \"versions\": [{\"model\": \"fmnist@production\", ...}]}");
  const std::string name = spec["name"];
  check_model_name(name, "service name");
  for (auto& [k, v] : spec.items())
    KILN_CHECK(k == "name" || k == "versions" || k == "log_payloads" || k == "project", "unknown field '", k,
               "' of a service (name, project, versions, log_payloads)");
  const double log_payloads = number_field(spec, "log_payloads", 0, 0, 1);
  std::string project = kDefaultProject;
  if (spec.contains("project")) {
    KILN_CHECK(spec["project"].is_string(), "\"project\" is a project's name");
    project = spec["project"];
    KILN_CHECK(project_exists(db_, project), "no project '", project, "'");
  }
  std::vector<ServiceVersionSpec> versions;
  for (const auto& v : spec["versions"]) {
    ServiceVersionSpec base;
    base.name = "v" + std::to_string(versions.size() + 1);
    versions.push_back(parse_service_version(v, base));
    for (size_t k = 0; k + 1 < versions.size(); ++k)
      KILN_CHECK(versions[k].name != versions.back().name, "two versions are named '", versions.back().name, "'");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (services_.count(name)) throw Conflict("service '" + name + "' exists; change it with PUT .../versions/NAME");
  auto s = std::make_shared<Service>();
  s->name = name;
  s->created_ms = now_ms();
  s->log_payloads = log_payloads;
  s->project = project;
  try {
    for (const auto& v : versions) s->versions.push_back(start_version(*s, v, ++s->generation));
  } catch (...) {
    throw;  // nothing was started: the supervisor starts instances
  }
  services_[name] = s;
  save(*s);
  wake_.notify_all();
  return describe(*s);
}

void Services::save(const Service& s) {
  json versions = json::array();
  for (const auto& v : s.versions) versions.push_back(version_json(v->spec));
  json spec = {{"name", s.name}, {"project", s.project}, {"versions", versions}};
  if (s.log_payloads > 0) spec["log_payloads"] = s.log_payloads;
  Statement(db_, "INSERT INTO services (name, spec, state, reason, created_at, project) VALUES (?, ?, ?, ?, ?, ?) "
                 "ON CONFLICT (name) DO UPDATE SET spec = excluded.spec, state = excluded.state, reason = excluded.reason")
      .bind(1, s.name).bind(2, spec.dump()).bind(3, s.state)
      .bind(4, s.reason).bind(5, s.created_ms).bind(6, s.project)
      .run();
}

json Services::describe(const Service& s) {
  json versions = json::array();
  auto instances_of = [](const Version& v, const char* role) {
    json out = json::array();
    for (const auto& i : v.instances)
      out.push_back({{"id", i->id}, {"pid", i->pid}, {"port", i->port}, {"ready", i->ready.load()},
                     {"restarts", i->restarts}, {"outstanding", i->outstanding.load()}, {"role", role}});
    return out;
  };
  for (const auto& v : s.versions) {
    json instances = instances_of(*v, "serving");
    for (const auto& w : s.warming)
      if (w->spec.name == v->spec.name)
        for (auto& i : instances_of(*w, "warming")) instances.push_back(i);
    json version = {{"name", v->spec.name}, {"model", v->spec.model},
                    {"model_version", v->model_name + "/" + std::to_string(v->model_version)},
                    {"weight", v->spec.weight}, {"threads", v->spec.threads}, {"memory_mb", v->spec.memory_mb},
                    {"max_batch", v->spec.max_batch},
                    {"instances", instances}, {"probe", v->probe.empty() ? "ready endpoint" : "inference"},
                    {"load", {{"in_flight", v->mean_in_flight}, {"latency_ms", v->mean_latency_ms}}}};
    if (v->spec.autoscaled())
      version["autoscale"] = {{"min_instances", v->spec.min_instances},
                              {"max_instances", v->spec.max_instances},
                              {"target_outstanding", v->spec.target_outstanding},
                              {"target_latency_ms", v->spec.target_latency_ms},
                              {"scale_down_after_s", v->spec.scale_down_after_s}};
    versions.push_back(std::move(version));
  }
  return {{"name", s.name},
          {"project", s.project},
          {"state", s.state},
          {"reason", s.reason},
          {"created_ms", s.created_ms},
          {"versions", versions},
          {"events", json(std::vector<json>(s.events.begin(), s.events.end()))},
          {"log_payloads", s.log_payloads},
          {"endpoint", "/api/v1/services/" + s.name + "/v2/models/" + s.name + "/infer"}};
}

json Services::list() {
  std::lock_guard<std::mutex> lock(mu_);
  json out = json::array();
  for (auto& [name, s] : services_) out.push_back(describe(*s));
  Statement st(db_, "SELECT name, state, reason, project FROM services WHERE state IN ('Stopped', 'Failed') ORDER BY name");
  while (st.step())
    if (!services_.count(st.text(0)))
      out.push_back({{"name", st.text(0)}, {"project", st.text(3)}, {"state", st.text(1)}, {"reason", st.text(2)},
                     {"versions", json::array()}});
  return {{"services", out}};
}

json Services::get(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = services_.find(name);
  if (it != services_.end()) return describe(*it->second);
  Statement st(db_, "SELECT state, reason, project FROM services WHERE name = ?");
  st.bind(1, name);
  if (!st.step()) throw NotFound("no service '" + name + "' (`kiln service list` shows them)");
  return {{"name", name}, {"project", st.text(2)}, {"state", st.text(0)}, {"reason", st.text(1)},
          {"versions", json::array()}};
}

json Services::set_version(const std::string& name, const std::string& version, const json& body) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = find(name);
  KILN_CHECK(s->state != "Stopping", "service '", name, "' is stopping");
  for (const auto& w : s->warming)
    if (w->spec.name == version)
      throw Conflict("version '" + version + "' of service '" + name + "' is already being rolled over");
  std::shared_ptr<Version> current;
  for (auto& v : s->versions)
    if (v->spec.name == version) current = v;
  ServiceVersionSpec base = current ? current->spec : ServiceVersionSpec{};
  base.name = version;
  json fields = body;
  fields.erase("name");
  ServiceVersionSpec next = parse_service_version(fields, base);
  if (!current) {  // a new version
    s->versions.push_back(start_version(*s, next, ++s->generation));
  } else if (next.model != current->spec.model || next.threads != current->spec.threads ||
             next.memory_mb != current->spec.memory_mb ||
             next.max_batch != current->spec.max_batch || models_.resolve(next.model).version != current->model_version) {
    // A rolling update: the new instances warm up while the old ones serve.
    s->warming.push_back(start_version(*s, next, ++s->generation));
  } else {
    const int instances = next.instances;
    next.instances = current->spec.instances;
    current->spec = next;  // weight and the autoscaling bounds change in place
    resize(*s, *current, instances);
  }
  update_state(*s);
  save(*s);
  wake_.notify_all();
  return describe(*s);
}

void Services::resize(Service& s, Version& v, int instances) {
  while (static_cast<int>(v.instances.size()) < instances) {
    auto i = std::make_shared<Instance>();
    i->id = next_instance_++;
    i->log = v.logs + "/instance-" + std::to_string(i->id) + ".log";
    v.instances.push_back(i);
  }
  if (static_cast<int>(v.instances.size()) > instances) {
    auto gone = std::make_shared<Version>();  // drained like a replaced version
    gone->spec = v.spec;
    gone->stats = v.stats;
    gone->instances.assign(v.instances.begin() + instances, v.instances.end());
    v.instances.resize(static_cast<size_t>(instances));
    for (auto& i : gone->instances) i->draining = true, i->drain_since_ms = now_ms();
    s.draining.push_back(gone);
  }
  v.spec.instances = instances;
}

void Services::remove_version(const std::string& name, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = find(name);
  auto it = std::find_if(s->versions.begin(), s->versions.end(), [&](auto& v) { return v->spec.name == version; });
  if (it == s->versions.end()) throw NotFound("service '" + name + "' has no version '" + version + "'");
  KILN_CHECK(s->versions.size() > 1, "version '", version, "' is the last of service '", name,
             "'; stop or delete the service instead");
  for (auto& i : (*it)->instances) i->draining = true, i->drain_since_ms = now_ms();
  s->draining.push_back(*it);
  s->versions.erase(it);
  save(*s);
}

void Services::stop(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto s = find(name);
  s->state = "Stopping";
  for (auto* list : {&s->versions, &s->warming})
    for (auto& v : *list) {
      for (auto& i : v->instances) i->draining = true, i->drain_since_ms = now_ms();
      s->draining.push_back(v);
    }
  s->versions.clear();
  s->warming.clear();
  save(*s);
  wake_.notify_all();
}

void Services::remove(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = services_.find(name);
    if (it != services_.end() && it->second->state != "Stopped")
      throw Conflict("service '" + name + "' is " + it->second->state + "; stop it first (kiln service stop)");
    const int64_t deleted = Statement(db_, "DELETE FROM services WHERE name = ?").bind(1, name).run();
    if (deleted == 0 && it == services_.end()) throw NotFound("no service '" + name + "'");
    if (it != services_.end()) services_.erase(it);
  }
  std::error_code ec;
  fs::remove_all(root_ + "/" + name, ec);
}

json Services::metrics(const std::string& name) {
  std::vector<std::pair<int, std::string>> ports;  // and their tokens
  json versions = json::object();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = find(name);
    for (const auto& [version, stats] : s->stats) {
      json buckets = json::array();
      for (size_t b = 0; b < kBucketsMs.size(); ++b)
        buckets.push_back({{"le", b + 1 == kBucketsMs.size() ? json("+Inf") : json(kBucketsMs[b])},
                           {"count", stats->buckets[b].load()}});
      versions[version] = {{"requests", stats->requests.load()}, {"errors", stats->errors.load()},
                           {"latency_ms_buckets", buckets}};
    }
    for (const auto& v : s->versions)
      for (const auto& i : v->instances)
        if (i->ready) ports.emplace_back(i->port, v->secret);
  }
  // The instances' own Prometheus counters, summed over the ready instances
  // (gauges such as queue depth are summed too: the service's total).
  std::map<std::string, double> summed;
  for (const auto& [port, secret] : ports) {
    httplib::Client c("127.0.0.1", port);
    c.set_bearer_token_auth(secret);
    c.set_connection_timeout(1);
    c.set_read_timeout(2);
    auto r = c.Get("/metrics");
    if (!r || r->status != 200) continue;
    std::istringstream lines(r->body);
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      if (space == std::string::npos) continue;
      try {
        summed[line.substr(0, space)] += std::stod(line.substr(space + 1));
      } catch (const std::exception&) {
      }
    }
  }
  return {{"service", name}, {"versions", versions}, {"instances", summed}, {"instances_scraped", ports.size()}};
}

std::string Services::logs(const std::string& name, int instance, const std::string& grep) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = find(name);
    for (auto* list : {&s->versions, &s->warming, &s->draining})
      for (const auto& v : *list)
        for (const auto& i : v->instances)
          if (i->id == instance) path = i->log;
  }
  if (path.empty()) throw NotFound("service '" + name + "' has no instance " + std::to_string(instance));
  const std::string text = read_text(path);
  if (grep.empty()) return text;
  std::regex pattern;
  try {
    pattern = std::regex(grep);
  } catch (const std::regex_error& e) {
    KILN_FAIL("grep '", grep, "' is not a regular expression (", e.what(), ")");
  }
  std::string out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, pattern)) out += line + "\n";
  return out;
}

void Services::update_state(Service& s) {
  if (s.state == "Stopping" || s.state == "Stopped" || s.state == "Failed") return;
  int ready = 0, total = 0;
  for (const auto& v : s.versions)
    for (const auto& i : v->instances) {
      ++total;
      ready += i->ready ? 1 : 0;
    }
  const std::string state = ready == total ? "Running" : s.was_running ? "Concerning" : "Deploying";
  if (state == "Running") s.was_running = true;
  if (state != s.state) {
    s.state = state;
    s.reason = state == "Concerning" ? std::to_string(total - ready) + " of " + std::to_string(total) +
                                           " instances are not ready; they are being restarted"
                                     : "";
    save(s);
  }
}

void Services::supervise() {
  while (!stopping_) {
    // Readiness probes are HTTP requests: they run after the sweep, without
    // the lock that every proxied request takes.
    std::vector<std::shared_ptr<Instance>> probes;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (stopping_) break;
      for (auto& [name, s] : services_) {
        for (auto* list : {&s->versions, &s->warming, &s->draining}) {
          for (auto& v : *list) {
            for (auto& i : v->instances) {
              if (i->pending) {
                i->pending = false;
                if (!i->draining && s->state != "Failed") {
                  try {
                    start_instance(*s, *v, *i);
                  } catch (const std::exception&) {  // fork failed: tried again as a restart
                  }
                }
                continue;
              }
              int status = 0;
              if (i->pid > 0 && ::waitpid(i->pid, &status, WNOHANG) == i->pid) {
                i->pid = -1;
                i->ready = false;
                if (i->draining) continue;
                if (!i->ever_ready && ++i->start_failures >= kMaxStartFailures) {
                  s->state = "Failed";
                  s->reason = "instance " + std::to_string(i->id) + " of version '" + v->spec.name + "' exited " +
                              std::to_string(kMaxStartFailures) + " times before it was ready; its log ends: " +
                              last_line(read_text(i->log, i->log_from));
                  save(*s);
                  continue;
                }
                if (s->state == "Failed") continue;
                ++i->restarts;
                i->ever_ready = false;
                try {
                  start_instance(*s, *v, *i);
                } catch (const std::exception&) {
                }
                continue;
              }
              if (i->pid <= 0 || i->draining) continue;
              if (i->port == 0) {
                const std::string text = read_text(i->log, i->log_from);
                const std::string mark = "ready on 127.0.0.1:";
                auto at = text.find(mark);
                if (at != std::string::npos) i->port = std::atoi(text.c_str() + at + mark.size());
              }
              if (i->port > 0 && (!i->ready || now_ms() - i->probed_ms >= kProbeEveryMs)) probes.push_back(i);
              // Unloaded or frozen for long: killed here, started again above once it has exited.
              if (i->ever_ready && !i->ready && i->unready_since_ms > 0 &&
                  now_ms() - i->unready_since_ms > kRestartUnreadyAfterMs) {
                std::fprintf(stderr, "kiln studio: service %s: instance %d has not answered its readiness probe for %lld s; "
                             "restarting it\n", name.c_str(), i->id, static_cast<long long>(kRestartUnreadyAfterMs / 1000));
                ::kill(i->pid, SIGKILL);
                i->unready_since_ms = 0;
              }
            }
          }
        }
        // A rolling update switches over once the new instances are all ready.
        for (auto it = s->warming.begin(); it != s->warming.end();) {
          if (!(*it)->all_ready()) {
            ++it;
            continue;
          }
          for (auto& v : s->versions) {
            if (v->spec.name != (*it)->spec.name) continue;
            for (auto& i : v->instances) i->draining = true, i->drain_since_ms = now_ms();
            s->draining.push_back(v);
            v = *it;
          }
          it = s->warming.erase(it);
          save(*s);
        }
        // Replaced instances stop once their requests are answered (or after 30 s).
        for (auto& v : s->draining)
          for (auto& i : v->instances)
            if (i->pid > 0 && (i->outstanding == 0 || now_ms() - i->drain_since_ms > 30000)) {
              ::kill(i->pid, SIGTERM);
              i->ready = false;
            }
        std::erase_if(s->draining, [](const std::shared_ptr<Version>& v) {
          for (auto& i : v->instances)
            if (i->pid > 0) return false;
          return true;
        });
        if (s->state == "Stopping" && s->draining.empty()) {
          s->state = "Stopped";
          s->reason = "";
          save(*s);
        }
        update_state(*s);
        if (s->state == "Running" || s->state == "Concerning") autoscale(*s);
      }
    }
    // Instance fields other than `ready` belong to this thread alone.
    // The probe asks for the served model, not the process: an instance
    // whose model was unloaded, or that is frozen, is taken out of routing.
    // A ready instance must also answer an inference (zeros, from the
    // model's signature) before it takes traffic and every few seconds after;
    // one that refuses the request itself (400) is judged on its ready
    // endpoint alone, since the probe, not the instance, is then at fault.
    for (auto& i : probes) {
      httplib::Client probe("127.0.0.1", i->port);
      probe.set_connection_timeout(0, 200000);
      probe.set_read_timeout(1);
      probe.set_bearer_token_auth(i->secret);
      auto r = probe.Get("/v2/models/" + i->model + "/ready");
      bool ok = r && r->status == 200;
      if (ok && !i->probe.empty() && (!i->ready || now_ms() - i->inferred_ms >= kInferEveryMs)) {
        probe.set_read_timeout(10);
        auto answer = probe.Post("/v2/models/" + i->model + "/infer", i->probe, "application/json");
        ok = answer && (answer->status == 200 || answer->status == 400);
        if (answer && answer->status == 400) {
          std::fprintf(stderr, "kiln studio: instance %d refused its inference probe (%s); probing its ready endpoint "
                       "only\n", i->id, answer->body.substr(0, 200).c_str());
          i->probe.clear();
        }
        if (ok) i->inferred_ms = now_ms();
      }
      i->probed_ms = now_ms();
      if (ok) {
        i->ever_ready = true, i->start_failures = 0, i->ready = true, i->unready_since_ms = 0;
      } else if (i->ready || (i->ever_ready && i->unready_since_ms == 0)) {
        i->ready = false;
        i->unready_since_ms = now_ms();
      }
    }
  }
}

}  // namespace kiln::studio

#include "studio/notebooks.h"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>

#include "kiln/error.h"
#include "kiln/studio.h"
#include "studio/executors.h"
#include "studio/job_spec.h"
#include "studio/models.h"
#include "studio/projects.h"
#include "studio/tokens.h"
#include "studio/tunnel.h"

namespace kiln::studio {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJupyter = "/usr/bin/jupyter-notebook";

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof addr;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &size) == 0;
  if (fd >= 0) ::close(fd);
  KILN_CHECK(ok, "no free port for a notebook");
  return ntohs(addr.sin_port);
}

// Jupyter's times ("2026-12-05T08:24:11.721684Z") as seconds since the epoch.
double epoch_of(const std::string& iso) {
  std::tm t{};
  if (iso.size() < 19 || !strptime(iso.substr(0, 19).c_str(), "%Y-%m-%dT%H:%M:%S", &t)) return 0;
  return static_cast<double>(timegm(&t));
}

json spec_json(const NotebookSpec& s) {
  return {{"cpus", s.cpus}, {"memory_mb", s.memory_mb}, {"idle_timeout_s", s.idle_timeout_s},
          {"save_every_s", s.save_every_s}};
}

int int_of(const json& j, const char* key, int fallback, int lo, int hi) {
  if (!j.contains(key)) return fallback;
  KILN_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() >= lo && j[key].get<int64_t>() <= hi, "\"", key,
             "\" must be a whole number from ", lo, " to ", hi);
  return j[key].get<int>();
}

}  // namespace

NotebookSpec parse_notebook_spec(const json& body) {
  NotebookSpec s;
  const Resources r = parse_resources(body.value("spec", json("cpu-2")), "a notebook's spec");
  KILN_CHECK(r.gpus == 0, "a notebook's spec: notebooks run on CPU cores (a cpu-N flavour)");
  s.cpus = std::max(1, r.cpus);
  s.memory_mb = r.memory_mb;
  s.idle_timeout_s = int_of(body, "idle_timeout_s", s.idle_timeout_s, 1, 7 * 86400);
  s.save_every_s = int_of(body, "save_every_s", s.save_every_s, 1, 86400);
  return s;
}

struct Notebooks::Running {
  std::string name, project, owner, secret, folder, work;
  NotebookSpec spec;
  int port = 0;
  std::unique_ptr<Execution> execution;
  SyncedFiles synced;
  Clock::time_point next_save, next_idle_check, started = Clock::now();
  std::atomic<int64_t> last_request_s{0};  // steady seconds of the last proxied request
  std::atomic<bool> stop_requested{false};
  bool ready = false, idle = false;
};

Notebooks::Notebooks(Database& db, ObjectStore& store, std::string root, std::string kiln, std::string sandbox,
                     std::string hidden)
    : db_(db), store_(store), root_(std::move(root)), kiln_(std::move(kiln)), sandbox_(std::move(sandbox)),
      hidden_(std::move(hidden)) {
  fs::create_directories(root_);
  // Notebooks that ran when the studio stopped were saved then: they are Stopped now.
  Statement(db_, "UPDATE notebooks SET state = 'Stopped', reason = 'the studio stopped; its work was saved' "
                 "WHERE state <> 'Stopped'").run();
  supervisor_ = std::thread([this] { supervise(); });
}

Notebooks::~Notebooks() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, r] : running_) r->stop_requested = true, r->execution->terminate();
  }
  // The supervisor saves each one as it exits.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (running_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stopping_ = true;
  supervisor_.join();
}

std::string Notebooks::bucket_of(const std::string& project) const { return project + "-notebooks"; }

json Notebooks::create(const json& body, const std::string& owner) {
  KILN_CHECK(body.is_object() && body.contains("name") && body["name"].is_string(),
             "a notebook is {\"name\": ..., \"project\": ..., \"spec\": \"cpu-2\", \"idle_timeout_s\": 3600}");
  for (auto& [k, v] : body.items())
    KILN_CHECK(k == "name" || k == "project" || k == "spec" || k == "idle_timeout_s" || k == "save_every_s",
               "unknown field '", k, "' of a notebook (name, project, spec, idle_timeout_s, save_every_s)");
  KILN_CHECK(::access(kJupyter, X_OK) == 0, "notebooks need Jupyter on the studio's machine (apt-get install "
             "jupyter-notebook; scripts/install-deps.sh does)");
  const std::string name = body["name"];
  check_model_name(name, "notebook name");
  const std::string project = body.value("project", std::string(kDefaultProject));
  KILN_CHECK(project_exists(db_, project), "no project '", project, "'");
  const NotebookSpec spec = parse_notebook_spec(body);
  {
    Statement known(db_, "SELECT 1 FROM notebooks WHERE name = ?");
    known.bind(1, name);
    if (known.step()) throw Conflict("notebook '" + name + "' exists; start it (kiln notebook start " + name + ")");
  }
  Statement(db_, "INSERT INTO notebooks (name, project, owner, spec, state, reason, created_at) "
                 "VALUES (?, ?, ?, ?, 'Stopped', '', ?)")
      .bind(1, name).bind(2, project).bind(3, owner).bind(4, spec_json(spec).dump()).bind(5, now_ms()).run();
  return start(name);
}

json Notebooks::start(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_.count(name)) launch(name);
  }
  return get(name);
}

void Notebooks::launch(const std::string& name) {
  auto r = std::make_shared<Running>();
  {
    Statement s(db_, "SELECT project, owner, spec FROM notebooks WHERE name = ?");
    s.bind(1, name);
    if (!s.step()) throw NotFound("no notebook '" + name + "' (`kiln notebook list` shows them)");
    r->project = s.text(0), r->owner = s.text(1);
    const json stored = json::parse(s.text(2));  // as spec_json wrote it
    r->spec.cpus = stored.value("cpus", r->spec.cpus);
    r->spec.memory_mb = stored.value("memory_mb", r->spec.memory_mb);
    r->spec.idle_timeout_s = stored.value("idle_timeout_s", r->spec.idle_timeout_s);
    r->spec.save_every_s = stored.value("save_every_s", r->spec.save_every_s);
  }
  r->name = name;
  r->folder = root_ + "/" + name;
  r->work = r->folder + "/work";
  // Its work as it was saved: the store's copy, not what a crash left on disk.
  std::error_code ec;
  fs::remove_all(r->work, ec);
  const std::string bucket = bucket_of(r->project);
  store_.create_bucket(bucket, r->project);
  copy_store_to_folder(store_, bucket, name + "/", r->work, "studio://" + bucket + "/" + name);
  r->port = free_port();
  r->secret = random_secret();
  revoke_tokens(db_, "notebook:" + name);
  // A token of its user's (studio-wide when a studio-wide token made it), revoked when it stops.
  const std::string token = create_token(db_, "notebook:" + name, Scope::Write, 0, r->owner);
  LaunchRequest request;
  request.launcher = {kJupyter,
                      "--allow-root",
                      "--no-browser",
                      "--ip=127.0.0.1",
                      "--port=" + std::to_string(r->port),
                      "--port-retries=0",
                      "--NotebookApp.token=" + r->secret,
                      "--NotebookApp.base_url=/api/v1/notebooks/" + name + "/proxy/",
                      "--NotebookApp.allow_origin=*",
                      "--notebook-dir=" + r->work,
                      "--MappingKernelManager.cull_idle_timeout=" + std::to_string(r->spec.idle_timeout_s),
                      "--MappingKernelManager.cull_interval=" + std::to_string(std::max(1, r->spec.idle_timeout_s / 2))};
  request.env = {{"KILN_STUDIO_URL", studio_url_},
                 {"KILN_STUDIO_TOKEN", token},
                 {"KILN_NUM_THREADS", std::to_string(r->spec.cpus)},
                 {"OMP_NUM_THREADS", std::to_string(r->spec.cpus)}};
  // `kiln` importable: the package beside this kiln (a build tree), else where Python finds it.
  const fs::path package = fs::path(kiln_).parent_path() / "python";
  if (fs::exists(package / "kiln")) request.env["PYTHONPATH"] = package.string();
  request.name = "notebook " + name;
  request.job_dir = r->folder;
  request.workdir = r->work;
  request.log_path = r->folder + "/jupyter.log";
  request.resources.cpus = r->spec.cpus;
  request.resources.memory_mb = r->spec.memory_mb;
  if (!sandbox_.empty()) request.sandbox = sandbox_, request.hidden = {hidden_};
  r->execution = start_local(request);
  r->next_save = Clock::now() + std::chrono::seconds(r->spec.save_every_s);
  r->last_request_s = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
  running_[name] = r;
  set_state(name, "Starting", "");
}

json Notebooks::stop(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(name);
    if (it == running_.end()) return get(name);  // already stopped
    it->second->stop_requested = true;
    it->second->execution->terminate();
  }
  set_state(name, "Stopping", "saving its work");
  return get(name);
}

void Notebooks::remove(const std::string& name) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_.count(name)) throw Conflict("notebook '" + name + "' is running; stop it first (kiln notebook stop)");
  }
  if (Statement(db_, "DELETE FROM notebooks WHERE name = ?").bind(1, name).run() == 0)
    throw NotFound("no notebook '" + name + "'");
  std::error_code ec;
  fs::remove_all(root_ + "/" + name, ec);
}

json Notebooks::get(const std::string& name) {
  Statement s(db_, "SELECT name, project, owner, spec, state, reason, created_at FROM notebooks WHERE name = ?");
  s.bind(1, name);
  if (!s.step()) throw NotFound("no notebook '" + name + "' (`kiln notebook list` shows them)");
  return {{"name", s.text(0)},   {"project", s.text(1)}, {"owner", s.text(2)},
          {"spec", json::parse(s.text(3))}, {"state", s.text(4)}, {"reason", s.text(5)},
          {"created_ms", s.integer(6)},
          {"url", "/api/v1/notebooks/" + s.text(0) + "/proxy/tree"},
          {"saved_to", "studio://" + bucket_of(s.text(1)) + "/" + s.text(0) + "/"}};
}

json Notebooks::list() {
  std::vector<std::string> names;
  {
    Statement s(db_, "SELECT name FROM notebooks ORDER BY name");
    while (s.step()) names.push_back(s.text(0));
  }
  json out = json::array();
  for (const auto& n : names) out.push_back(get(n));
  return {{"notebooks", out}};
}

void Notebooks::set_state(const std::string& name, const std::string& state, const std::string& reason) {
  Statement(db_, "UPDATE notebooks SET state = ?, reason = ? WHERE name = ?").bind(1, state).bind(2, reason)
      .bind(3, name).run();
}

void Notebooks::save(Running& r) {
  try {
    copy_folder_to_store(store_, r.work, bucket_of(r.project), r.name + "/", r.synced);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln studio: notebook %s: saving its work failed: %s\n", r.name.c_str(), e.what());
  }
}

void Notebooks::supervise() {
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    std::vector<std::shared_ptr<Running>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [name, r] : running_) all.push_back(r);
    }
    for (auto& r : all) {
      const auto now = Clock::now();
      if (const std::optional<int> code = r->execution->poll()) {
        save(*r);
        revoke_tokens(db_, "notebook:" + r->name);
        std::string reason = "stopped on request; its work is saved";
        if (r->idle)
          reason = "idle for " + std::to_string(r->spec.idle_timeout_s) + " s; its work is saved";
        else if (!r->stop_requested)
          reason = "Jupyter exited with status " + std::to_string(*code) + " (its log: " + r->folder + "/jupyter.log)";
        {
          std::lock_guard<std::mutex> lock(mu_);
          running_.erase(r->name);
        }
        set_state(r->name, "Stopped", reason);
        continue;
      }
      httplib::Client jupyter("127.0.0.1", r->port);
      jupyter.set_connection_timeout(0, 200000);
      jupyter.set_read_timeout(2);
      jupyter.set_default_headers({{"Authorization", "token " + r->secret}});
      const std::string base = "/api/v1/notebooks/" + r->name + "/proxy/api/";
      if (!r->ready) {
        if (auto status = jupyter.Get(base + "status"); status && status->status == 200) {
          r->ready = true;
          set_state(r->name, "Running", "");
        }
        continue;
      }
      if (now >= r->next_save) {
        save(*r);
        r->next_save = now + std::chrono::seconds(r->spec.save_every_s);
      }
      // Idle: no request through the studio and no kernel at work for the idle time.
      if (now < r->next_idle_check || r->stop_requested) continue;
      r->next_idle_check = now + std::chrono::seconds(1);
      const double now_s = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
      if (now_s - static_cast<double>(r->last_request_s.load()) < r->spec.idle_timeout_s) continue;
      auto kernels = jupyter.Get(base + "kernels");
      if (!kernels || kernels->status != 200) continue;
      double last = 0;
      const json list = json::parse(kernels->body, nullptr, false);
      for (const auto& k : list.is_array() ? list : json::array()) {
        last = std::max(last, epoch_of(k.value("last_activity", "")));
        if (k.value("execution_state", "") == "busy") last = 1e300;
      }
      if (static_cast<double>(std::time(nullptr)) - last >= r->spec.idle_timeout_s) {
        r->idle = true;
        r->stop_requested = true;
        r->execution->terminate();
        set_state(r->name, "Stopping", "idle; saving its work");
      }
    }
  }
}

void Notebooks::forward(const std::string& name, const serve::HttpRequest& req, serve::HttpResponse& res) {
  std::shared_ptr<Running> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = running_.find(name);
    if (it != running_.end()) r = it->second;
  }
  if (!r || !r->ready) {
    get(name);  // a 404 for a notebook that is not there
    serve::set_error(res, 503, "notebook '" + name + "' is not running (kiln notebook start " + name + ")");
    return;
  }
  r->last_request_s = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
  const std::string target = req.path + (req.query.empty() ? "" : "?" + req.query);
  const std::string* upgrade = req.header("Upgrade");
  if (upgrade && (*upgrade == "websocket" || *upgrade == "WebSocket")) {
    // The kernel's channels: the request goes on as it came, with Jupyter's token.
    std::string head = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(r->port) + "\r\n";
    for (const auto& [k, v] : req.headers) {
      std::string lower = k;
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower != "authorization" && lower != "host" && lower != "cookie") head += k + ": " + v + "\r\n";
    }
    head += "Authorization: token " + r->secret + "\r\n\r\n";
    const int port = r->port;
    res.takeover = [this, port, head](int fd, std::string_view early) { tunnel(fd, early, port, head, stopping_); };
    return;
  }
  httplib::Client jupyter("127.0.0.1", r->port);
  jupyter.set_read_timeout(300);
  httplib::Request out;
  out.method = req.method;
  out.path = target;
  out.body = req.body;
  out.set_header("Authorization", "token " + r->secret);
  for (const char* h : {"Content-Type", "Accept", "X-XSRFToken"})
    if (const std::string* v = req.header(h)) out.set_header(h, *v);
  auto answer = jupyter.send(out);
  if (!answer) {
    serve::set_error(res, 502, "notebook '" + name + "' did not answer");
    return;
  }
  res.status = answer->status;
  res.body = answer->body;
  res.content_type = answer->get_header_value("Content-Type");
  for (const char* h : {"Location", "Set-Cookie", "Cache-Control", "Content-Disposition", "Etag"})
    if (answer->has_header(h)) res.headers.emplace_back(h, answer->get_header_value(h));
}

}  // namespace kiln::studio

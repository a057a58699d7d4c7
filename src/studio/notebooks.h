#pragma once
// Notebooks: a Jupyter server (Debian's jupyter-notebook) per notebook, run
// like a local job (the sandbox, a memory cgroup) on a spec of CPU cores and
// memory, in a working folder kept in the store: restored from the
// project's notebooks bucket when it starts, saved there while it runs and
// when it stops, so its work outlives it. It is reached through the studio
// (/api/v1/notebooks/NAME/proxy/, its kernels' WebSockets tunnelled) with
// the caller's token, `kiln` importable and a token of the user's in its
// environment; it stops by itself after an idle time.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "serve/http_server.h"
#include "studio/database.h"
#include "studio/folder_sync.h"
#include "studio/object_store.h"

namespace kiln::studio {

struct NotebookSpec {
  int cpus = 2;
  int64_t memory_mb = 0;      // 0: no limit
  int idle_timeout_s = 3600;  // stops after this long without a kernel or a request
  int save_every_s = 60;
};

// A flavour ("cpu-N": N cores, 4 GB each) or {"cpus", "memory_mb"}, with idle_timeout_s and save_every_s.
NotebookSpec parse_notebook_spec(const nlohmann::json& body);

class Notebooks {
 public:
  // root: the notebooks' folders; sandbox: bubblewrap's program ("": none);
  // hidden: what the sandbox hides (the studio's data).
  Notebooks(Database& db, ObjectStore& store, std::string root, std::string kiln, std::string sandbox,
            std::string hidden);
  ~Notebooks();  // stops every notebook, saving its work

  // Where the studio listens, for the notebooks' KILN_STUDIO_URL.
  void set_studio_url(std::string url) { studio_url_ = std::move(url); }
  // {"name", "project", "spec": "cpu-2" | {...}, "idle_timeout_s"}; owner: the user (empty: studio-wide).
  nlohmann::json create(const nlohmann::json& body, const std::string& owner);
  nlohmann::json start(const std::string& name);
  nlohmann::json stop(const std::string& name);
  void remove(const std::string& name);
  nlohmann::json get(const std::string& name);
  nlohmann::json list();
  // A request for /api/v1/notebooks/NAME/proxy/...: to its Jupyter server,
  // a WebSocket through a tunnel.
  void forward(const std::string& name, const serve::HttpRequest& req, serve::HttpResponse& res);

 private:
  struct Running;
  void launch(const std::string& name);  // under mu_
  void supervise();
  void save(Running& r);
  void set_state(const std::string& name, const std::string& state, const std::string& reason);
  std::string bucket_of(const std::string& project) const;

  Database& db_;
  ObjectStore& store_;
  std::string root_, kiln_, sandbox_, hidden_, studio_url_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Running>> running_;
  std::atomic<bool> stopping_{false};
  std::thread supervisor_;
};

}  // namespace kiln::studio

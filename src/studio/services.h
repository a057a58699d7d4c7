#pragma once
// Online services: registered model versions served by `kiln serve`
// instances (local processes on free ports), behind one stable endpoint of
// the studio that forwards OIP v2 requests to healthy instances, least
// outstanding requests first, over kept-alive connections. A service has
// one or more named versions with integer traffic weights; changing a
// version's model rolls it over (the new instances warm up before the old
// ones drain). A supervisor restarts instances that die, probes each ready
// instance with an inference (a model that answers, not only a live
// process), and scales versions that ask for it between their minimum and
// maximum instances on the requests in flight or the latency the proxy sees.
// The proxy logs every request (payloads of a sampled share on request).
// States: Deploying, Running, Concerning, Failed, Stopping, Stopped.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "serve/http_server.h"
#include "studio/database.h"
#include "studio/models.h"

namespace kiln::studio {

struct ServiceVersionSpec {
  std::string name = "v1";
  std::string model;  // a registry URI: fmnist@production, fmnist/3
  int weight = 100;   // 0 to 100; all zero splits evenly
  int instances = 1;
  int threads = 1;    // KILN_NUM_THREADS of each instance
  int64_t memory_mb = 0;  // each instance's memory limit, enforced where the machine allows (0: none)
  int max_batch = 16; // dynamic batching up to this many samples
  // Autoscaling, when max_instances > min_instances: instances stays within
  // them, one more per target_outstanding requests in flight (averaged over
  // the last 2 s), or one more while the mean latency is over
  // target_latency_ms (0: latency is not a signal); one fewer once fewer
  // would have done for scale_down_after_s.
  int min_instances = 0, max_instances = 0;
  double target_outstanding = 4;
  double target_latency_ms = 0;
  int scale_down_after_s = 30;
  bool autoscaled() const { return max_instances > min_instances; }
};

class Services {
 public:
  // kiln: the executable that runs `kiln serve`; root: the services' folders.
  Services(Database& db, Models& models, std::string kiln, std::string root);
  ~Services();  // stops every instance

  // {"name": ..., "versions": [{"name", "model", "weight", "instances", "threads", "max_batch"}]}
  nlohmann::json deploy(const nlohmann::json& spec);
  nlohmann::json list();
  nlohmann::json get(const std::string& name);
  // Adds a version, or changes one: a new model rolls it over; weight and
  // instance count change in place. Fields left out keep their values.
  nlohmann::json set_version(const std::string& name, const std::string& version, const nlohmann::json& body);
  void remove_version(const std::string& name, const std::string& version);
  void stop(const std::string& name);
  void remove(const std::string& name);
  // Requests, errors and a latency histogram per version, as the proxy saw them.
  nlohmann::json metrics(const std::string& name);
  // The last `limit` requests the proxy forwarded, newest first: time,
  // version, instance, status, milliseconds, and the sampled ones' payloads.
  nlohmann::json requests(const std::string& name, int limit);
  // An instance's log (its kiln serve's stderr), or its lines that match
  // `grep` (a regular expression; a plain word matches itself).
  std::string logs(const std::string& name, int instance, const std::string& grep = "");
  // Forwards a request for /api/v1/services/NAME/<rest> to an instance.
  void forward(const std::string& name, const std::string& rest, const serve::HttpRequest& req,
               serve::HttpResponse& res);

  struct Instance;
  struct Version;
  struct Service;

 private:
  std::shared_ptr<Service> find(const std::string& name);
  std::shared_ptr<Version> start_version(Service& s, const ServiceVersionSpec& spec, int generation);
  void start_instance(Service& s, Version& v, Instance& i);
  void supervise();
  // Sets a version's instance count: new ones start, extra ones drain.
  void resize(Service& s, Version& v, int instances);
  // One autoscaling decision per version that asks for it.
  void autoscale(Service& s);
  // Adds a forwarded request to the service's request log.
  void log_request(Service& s, const Version& v, const Instance& i, const serve::HttpRequest& req, int status,
                   double ms, const std::string* answer);
  void update_state(Service& s);
  void save(const Service& s);
  nlohmann::json describe(const Service& s);

  Database& db_;
  Models& models_;
  std::string kiln_, root_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Service>> services_;
  std::atomic<bool> stopping_{false};
  std::condition_variable wake_;
  std::thread supervisor_;
  int next_instance_ = 1;
};

ServiceVersionSpec parse_service_version(const nlohmann::json& j, const ServiceVersionSpec& base);

}  // namespace kiln::studio

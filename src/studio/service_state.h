#pragma once
// What the studio keeps of each service, shared by the supervisor
// (services.cpp) and the proxy (service_proxy.cpp): its versions, their
// instances and the proxy's counts.
#include <sys/types.h>

#include <array>
#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "studio/memory_cgroup.h"
#include "studio/services.h"

namespace kiln::studio {

class InstanceConnection;  // service_proxy.cpp: a kept-alive connection to one instance

// Latency buckets of the proxy's histogram, in milliseconds (+Inf last).
constexpr std::array<double, 11> kBucketsMs = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1e300};

struct Services::Instance {
  int id = 0;
  pid_t pid = -1;
  // Started by the supervisor thread: PR_SET_PDEATHSIG fires when the thread
  // that forked exits, so instances come from that long-lived thread only.
  bool pending = true;
  int port = 0;
  std::atomic<bool> ready{false};
  bool draining = false;
  bool ever_ready = false;
  int start_failures = 0;
  int restarts = 0;
  int64_t drain_since_ms = 0;
  int64_t probed_ms = 0;         // the last readiness probe
  int64_t unready_since_ms = 0;  // when a ready instance stopped answering its probe
  std::string model, secret;     // what it serves, and the token it wants (the version's)
  std::string probe;             // an inference request its probe sends ("": the ready endpoint only)
  std::unique_ptr<MemoryCgroup> memory;  // its memory limit, where the machine allows one
  int64_t inferred_ms = 0;       // the last inference probe that was answered
  std::atomic<int> outstanding{0};
  std::string log;
  size_t log_from = 0;  // where this start's output begins in the log
  std::mutex pool_mu;
  std::vector<std::unique_ptr<InstanceConnection>> pool;  // kept-alive connections, one request each at a time

  Instance();  // both in service_proxy.cpp, where InstanceConnection is complete
  ~Instance();
  std::unique_ptr<InstanceConnection> take();
  void give(std::unique_ptr<InstanceConnection> c);
};

// What the proxy saw of one version name, across its rolling updates.
struct VersionStats {
  std::atomic<int64_t> requests{0}, errors{0};
  std::atomic<int64_t> latency_us{0};  // summed over the requests
  std::array<std::atomic<int64_t>, kBucketsMs.size()> buckets{};
};

struct Services::Version {
  ServiceVersionSpec spec;
  std::shared_ptr<VersionStats> stats;
  int generation = 0;
  std::string model_name;  // the registry's, resolved when started
  int64_t model_version = 0;
  bool batch_axis = false;
  std::string repo, logs;
  std::string secret;  // its instances' bearer token: only the proxy reaches them
  std::string probe;   // the inference its instances' probes send, from the model's signature
  std::vector<std::shared_ptr<Instance>> instances;
  // The autoscaler's view (the supervisor's alone): requests in flight, one
  // sample per sweep over the last 2 s; the latency since the last decision.
  std::deque<int> in_flight;
  int64_t seen_requests = 0, seen_latency_us = 0, sampled_ms = 0;
  double mean_in_flight = 0, mean_latency_ms = 0;
  int64_t fewer_since_ms = 0;  // since when fewer instances would have done (0: not now)
  bool all_ready() const {
    for (const auto& i : instances)
      if (!i->ready) return false;
    return !instances.empty();
  }
};

struct Services::Service {
  std::string name, state = "Deploying", reason;
  std::string project = "default";
  int64_t created_ms = 0;
  int generation = 0;
  bool was_running = false;
  std::vector<std::shared_ptr<Version>> versions;  // serving traffic
  std::vector<std::shared_ptr<Version>> warming;   // new models of a rolling update, not routed yet
  std::vector<std::shared_ptr<Version>> draining;  // replaced ones, finishing their requests
  std::map<std::string, std::shared_ptr<VersionStats>> stats;  // by version name
  std::deque<nlohmann::json> events;  // the last scaling decisions, newest last
  // The request log: every forwarded request, newest last (the last
  // kRequestLogSize); log_payloads of them keep their bodies.
  double log_payloads = 0;
  std::mutex log_mu;
  std::deque<nlohmann::json> request_log;
  int64_t logged = 0;
};

constexpr size_t kRequestLogSize = 1000;

}  // namespace kiln::studio

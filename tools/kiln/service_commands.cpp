// `kiln service deploy | list | show | set | remove-version | stop | delete | metrics | requests | logs`:
// online services in a studio.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "kiln/error.h"
#include "studio_client.h"

namespace kiln::cli {
namespace {

using json = nlohmann::json;

void print_service(const json& s) {
  std::printf("service %s  %s\n", s["name"].get<std::string>().c_str(), s["state"].get<std::string>().c_str());
  if (!s["reason"].get<std::string>().empty()) std::printf("  reason    %s\n", s["reason"].get<std::string>().c_str());
  if (s.contains("endpoint")) std::printf("  endpoint  %s\n", s["endpoint"].get<std::string>().c_str());
  for (const auto& v : s["versions"]) {
    std::printf("  version %-8s weight %3d  model %s (%s)\n", v["name"].get<std::string>().c_str(), v["weight"].get<int>(),
                v["model"].get<std::string>().c_str(), v["model_version"].get<std::string>().c_str());
    if (v.contains("autoscale")) {
      const json& a = v["autoscale"];
      std::printf("    autoscale %d..%d instances, %g requests in flight each", a["min_instances"].get<int>(),
                  a["max_instances"].get<int>(), a["target_outstanding"].get<double>());
      if (a["target_latency_ms"].get<double>() > 0) std::printf(", latency under %g ms", a["target_latency_ms"].get<double>());
      std::printf("; now %.1f in flight, %.1f ms\n", v["load"]["in_flight"].get<double>(),
                  v["load"]["latency_ms"].get<double>());
    }
    for (const auto& i : v["instances"])
      std::printf("    instance %-4d %-8s port %-6d %s  restarts %d\n", i["id"].get<int>(),
                  i["role"].get<std::string>().c_str(), i["port"].get<int>(), i["ready"].get<bool>() ? "ready" : "not ready",
                  i["restarts"].get<int>());
  }
  for (const auto& e : s.value("events", json::array()))
    std::printf("  scaled %s from %d to %d instances: %s\n", e["version"].get<std::string>().c_str(), e["from"].get<int>(),
                e["to"].get<int>(), e["reason"].get<std::string>().c_str());
}

// Autoscaling options, given to deploy and set alike.
struct Scaling {
  int min_instances = 0, max_instances = 0, scale_down_after_s = 30;
  double target_outstanding = 4, target_latency_ms = 0;
};

void add_scaling_options(CLI::App* cmd, Scaling& s) {
  cmd->add_option("--min-instances", s.min_instances, "Autoscaling: at least this many instances");
  cmd->add_option("--max-instances", s.max_instances, "Autoscaling: at most this many instances");
  cmd->add_option("--target-outstanding", s.target_outstanding,
                  "Autoscaling: requests in flight per instance (default 4)");
  cmd->add_option("--target-latency-ms", s.target_latency_ms, "Autoscaling: one more instance while latency is over this");
  cmd->add_option("--scale-down-after", s.scale_down_after_s,
                  "Autoscaling: seconds fewer instances must have done before one goes (default 30)");
}

// The autoscaling fields the command line gave.
void put_scaling(const CLI::App* cmd, const Scaling& s, json& version) {
  if (cmd->count("--min-instances")) version["min_instances"] = s.min_instances;
  if (cmd->count("--max-instances")) version["max_instances"] = s.max_instances;
  if (cmd->count("--target-outstanding")) version["target_outstanding"] = s.target_outstanding;
  if (cmd->count("--target-latency-ms")) version["target_latency_ms"] = s.target_latency_ms;
  if (cmd->count("--scale-down-after")) version["scale_down_after_s"] = s.scale_down_after_s;
}

}  // namespace

void add_service_commands(CLI::App& app) {
  auto* service = app.add_subcommand("service", "Online services: deploy registered models behind the studio");
  service->require_subcommand(1);
  auto server = std::make_shared<std::string>();
  auto token = std::make_shared<std::string>();
  struct Args {
    std::string name, version = "v1", model, grep, project, spec;
    int instances = 1, threads = 1, max_batch = 16, weight = -1, instance = 0, limit = 20;
    double log_payloads = 0;
    bool json_out = false;
    Scaling scaling;
  };
  auto a = std::make_shared<Args>();
  auto base = [](const std::string& name) { return "/api/v1/services/" + encode(name, false); };

  auto* deploy = service->add_subcommand("deploy", "Deploy a model as a service (one version, v1)");
  deploy->add_option("name", a->name, "Service name")->required();
  deploy->add_option("--model", a->model, "A registered model: NAME@ALIAS, NAME/VERSION or NAME")->required();
  deploy->add_option("--instances", a->instances, "kiln serve processes (default 1)");
  deploy->add_option("--threads", a->threads, "Threads of each instance (default 1)");
  deploy->add_option("--spec", a->spec, "Each instance's flavour: cpu-N (N threads, a 4 GB memory limit each)");
  deploy->add_option("--max-batch", a->max_batch, "Dynamic batching up to this many samples (default 16; 0: none)");
  deploy->add_option("--log-payloads", a->log_payloads,
                     "Share of requests whose bodies the request log keeps, 0 to 1 (default 0: none)");
  add_scaling_options(deploy, a->scaling);
  deploy->add_option("--project", a->project, "The project it belongs to (default: default)");
  deploy->callback([=] {
    json version = {{"name", "v1"}, {"model", a->model}, {"weight", 100}, {"max_batch", a->max_batch}};
    if (!a->spec.empty()) version["spec"] = a->spec;
    if (a->spec.empty() || deploy->count("--threads")) version["threads"] = a->threads;
    if (deploy->count("--instances")) version["instances"] = a->instances;
    put_scaling(deploy, a->scaling, version);
    json spec = {{"name", a->name}, {"versions", {version}}};
    if (a->log_payloads > 0) spec["log_payloads"] = a->log_payloads;
    if (!a->project.empty()) spec["project"] = a->project;
    print_service(Remote(*server, *token).post_json("/api/v1/services", spec, 201));
  });

  auto* set = service->add_subcommand("set", "Add a version or change one: a new --model rolls it over; --weight, --instances in place");
  set->add_option("name", a->name, "Service name")->required();
  set->add_option("version", a->version, "Version name, e.g. v1 or v2")->required();
  set->add_option("--model", a->model, "A registered model for this version");
  set->add_option("--weight", a->weight, "Traffic weight, 0 to 100");
  set->add_option("--instances", a->instances, "Instances of this version");
  add_scaling_options(set, a->scaling);
  set->callback([=] {
    json body = json::object();
    if (!a->model.empty()) body["model"] = a->model;
    if (a->weight >= 0) body["weight"] = a->weight;
    if (set->count("--instances")) body["instances"] = a->instances;
    put_scaling(set, a->scaling, body);
    print_service(Remote(*server, *token).send("PUT", base(a->name) + "/versions/" + encode(a->version, false),
                                               body.dump(), "application/json", 200));
  });

  auto* remove_version = service->add_subcommand("remove-version", "Take a version out of a service");
  remove_version->add_option("name", a->name, "Service name")->required();
  remove_version->add_option("version", a->version, "Version name")->required();
  remove_version->callback([=] {
    Remote(*server, *token).send("DELETE", base(a->name) + "/versions/" + encode(a->version, false), "", "", 204);
  });

  auto* list = service->add_subcommand("list", "Services, their states and versions");
  list->callback([=] {
    json all = Remote(*server, *token).get_json("/api/v1/services")["services"];
    if (all.empty()) std::printf("no services (kiln service deploy)\n");
    for (const auto& s : all) print_service(s);
  });

  auto* show = service->add_subcommand("show", "A service's state, versions and instances");
  show->add_option("name", a->name, "Service name")->required();
  show->callback([=] { print_service(Remote(*server, *token).get_json(base(a->name))); });

  auto* stop = service->add_subcommand("stop", "Stop a service's instances (Stopping, then Stopped)");
  stop->add_option("name", a->name, "Service name")->required();
  stop->callback([=] { print_service(Remote(*server, *token).post_json(base(a->name) + "/stop", json::object(), 202)); });

  auto* remove = service->add_subcommand("delete", "Delete a stopped service");
  remove->add_option("name", a->name, "Service name")->required();
  remove->callback([=] { Remote(*server, *token).send("DELETE", base(a->name), "", "", 204); });

  auto* metrics = service->add_subcommand("metrics", "Requests, errors and latency per version");
  metrics->add_option("name", a->name, "Service name")->required();
  metrics->callback([=] {
    json m = Remote(*server, *token).get_json(base(a->name) + "/metrics");
    for (auto& [version, v] : m["versions"].items()) {
      std::printf("version %-8s requests %-8lld errors %-6lld latency", version.c_str(), v["requests"].get<long long>(),
                  v["errors"].get<long long>());
      for (const auto& b : v["latency_ms_buckets"])
        if (b["count"].get<int64_t>() > 0)
          std::printf("  <=%sms: %lld", b["le"].is_string() ? "inf" : b["le"].dump().c_str(), b["count"].get<long long>());
      std::printf("\n");
    }
  });

  auto* requests = service->add_subcommand("requests", "The last requests the service answered, newest first");
  requests->add_option("name", a->name, "Service name")->required();
  requests->add_option("--limit", a->limit, "How many (default 20)")->check(CLI::Range(1, 1000));
  requests->add_flag("--json", a->json_out, "The log as JSON, with the sampled payloads");
  requests->callback([=] {
    json r = Remote(*server, *token).get_json(base(a->name) + "/requests?limit=" + std::to_string(a->limit));
    if (a->json_out) {
      std::printf("%s\n", r.dump(2).c_str());
      return;
    }
    std::printf("%lld requests logged; payloads kept for %g of them\n", r["logged"].get<long long>(),
                r["log_payloads"].get<double>());
    for (const auto& e : r["requests"])
      std::printf("  %lld  %-8s instance %-4d %d  %8.3f ms  %s%s\n", e["time_ms"].get<long long>(),
                  e["version"].get<std::string>().c_str(), e["instance"].get<int>(), e["status"].get<int>(),
                  e["ms"].get<double>(), e["path"].get<std::string>().c_str(), e.contains("request") ? "  (payloads)" : "");
  });

  auto* logs = service->add_subcommand("logs", "An instance's log");
  logs->add_option("name", a->name, "Service name")->required();
  logs->add_option("instance", a->instance, "Instance id (kiln service show lists them)")->required();
  logs->add_option("--grep", a->grep, "Only lines matching this word or regular expression");
  logs->callback([=] {
    std::string text = Remote(*server, *token).get_text(base(a->name) + "/instances/" + std::to_string(a->instance) +
                                                        "/logs?grep=" + encode(a->grep, false));
    std::fwrite(text.data(), 1, text.size(), stdout);
  });

  for (auto* sub : {deploy, set, remove_version, list, show, stop, remove, metrics, requests, logs}) {
    sub->add_option("--server", *server, "Studio URL (default: KILN_STUDIO_URL, or http://127.0.0.1:8080)");
    sub->add_option("--token", *token, "API token (default: KILN_STUDIO_TOKEN)");
  }
}

}  // namespace kiln::cli

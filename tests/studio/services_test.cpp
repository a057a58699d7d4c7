// Online services: registered versions deployed as kiln serve instances
// behind the studio's endpoint, traffic split by weight, rolling updates that
// fail no request, instances restarted when they die, and a studio restart
// that brings its services back.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"
#include "kiln/studio.h"
#include "studio/memory_cgroup.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;

namespace {

struct Client : kiln::testing::StudioApi {
  using StudioApi::StudioApi;
  // Polls the service until `pred` holds (or 60 s pass); returns its last description.
  json wait_for(const std::string& service, const std::function<bool(const json&)>& pred) {
    json s;
    for (int i = 0; i < 1200; ++i) {
      s = call("GET", "/api/v1/services/" + service).second;
      if (pred(s)) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "service " << service << " stayed " << s.dump();
    return s;
  }
};

bool in_state(const json& s, const char* state) { return s.is_object() && s["state"] == state; }

// A CNN with random weights, exported with a dynamic batch: each seed answers differently.
std::string cnn_onnx(uint64_t seed) {
  manual_seed(seed);
  auto net = models::make_model("cnn");
  net->set_train(false);
  ExportOptions o;
  o.dynamic_batch = true;
  return export_model_bytes(net, {zeros({1, 1, 28, 28})}, o);
}

json infer_body(int batch) {
  std::vector<float> data(static_cast<size_t>(batch) * 784);
  for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<float>((k * 37) % 101) / 101.0f;
  return {{"inputs", {{{"name", "input"}, {"shape", {batch, 1, 28, 28}}, {"datatype", "FP32"}, {"data", data}}}}};
}

// Registers `bytes` as the next version of model m and waits until it is READY.
int64_t register_model(Client& c, const std::string& bytes) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/api/v1/models/m/versions";
  req.body = bytes;
  req.set_header("Content-Type", "application/octet-stream");
  auto r = c.http.send(req);
  EXPECT_EQ(r->status, 201) << r->body;
  int64_t v = json::parse(r->body)["version"];
  for (int i = 0; i < 300; ++i) {
    if (c.call("GET", "/api/v1/models/m/versions/" + std::to_string(v)).second["state"] == "READY") return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "model version " << v << " did not become READY";
  return v;
}

// The first output value of an answer: which model answered.
float first_output(const httplib::Result& r) { return json::parse(r->body)["outputs"][0]["data"][0].get<float>(); }

}  // namespace

TEST(StudioServices, DeploySplitRollOverWithNoFailedRequest) {
  auto dir = fresh_dir("services");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  Client c(s.port, token);
  ASSERT_EQ(register_model(c, cnn_onnx(1)), 1);
  ASSERT_EQ(register_model(c, cnn_onnx(2)), 2);
  ASSERT_EQ(c.call_json("PUT", "/api/v1/models/m/aliases/production", {{"version", 1}}).first, 200);

  // Bad deployments are refused before anything starts.
  auto unknown = s.kiln(token, dir, "service deploy fm --model m@staging");
  EXPECT_NE(unknown.first, 0);
  EXPECT_NE(unknown.second.find("has no alias 'staging'"), std::string::npos) << unknown.second;
  const std::string reader = kiln::testing::create_token(dir, "viewer", studio::Scope::Read);
  EXPECT_EQ(Client(s.port, reader).call_json("POST", "/api/v1/services", {{"name", "x"}, {"versions", json::array()}}).first, 403);

  auto deployed = s.kiln(token, dir, "service deploy fm --model m@production --instances 2");
  ASSERT_EQ(deployed.first, 0) << deployed.second;
  json svc = c.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  ASSERT_EQ(svc["versions"][0]["instances"].size(), 2u);
  const std::string infer = "/api/v1/services/fm/v2/models/fm/infer";

  // Answers through the studio, from a read token too, equal to the model's own.
  Client viewer(s.port, reader);
  auto r = viewer.http.Post(infer, infer_body(3).dump(), "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["model_version"], "1") << "the answer names the registry's version";
  InferenceSession v1 = InferenceSession::from_bytes(cnn_onnx(1));
  std::vector<float> x = infer_body(3)["inputs"][0]["data"].get<std::vector<float>>();
  Tensor want = v1.run({from_vector<float>(x, {3, 1, 28, 28})})[0];
  EXPECT_NEAR(first_output(r), want.contiguous().data<float>()[0], 1e-4);
  // Binary tensors go through as they are.
  Tensor xt = from_vector<float>(x, {3, 1, 28, 28});
  json header = {{"inputs", {{{"name", "input"}, {"shape", {3, 1, 28, 28}}, {"datatype", "FP32"},
                              {"parameters", {{"binary_data_size", xt.numel() * 4}}}}}}};
  const std::string head = header.dump();
  auto binary = c.http.Post(infer, {{"Inference-Header-Content-Length", std::to_string(head.size())}},
                            head + std::string(static_cast<const char*>(xt.raw_data()), xt.numel() * 4),
                            "application/octet-stream");
  ASSERT_EQ(binary->status, 200) << binary->body;
  EXPECT_NEAR(first_output(binary), want.contiguous().data<float>()[0], 1e-4);
  // The instance's own refusal reaches the client unchanged.
  auto bad = c.http.Post(infer, R"({"inputs": [{"name": "input", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]})",
                         "application/json");
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_NE(bad->body.find("input"), std::string::npos) << bad->body;

  // 80/20 between two versions.
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v2", {{"model", "m/2"}, {"weight", 20}}).first, 200);
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1", {{"weight", 80}}).first, 200);
  c.wait_for("fm", [](const json& j) { return in_state(j, "Running") && j["versions"].size() == 2; });
  std::map<std::string, int> seen;
  const std::string one = infer_body(1).dump();
  for (int i = 0; i < 1000; ++i) {
    auto a = c.http.Post(infer, one, "application/json");
    ASSERT_TRUE(a && a->status == 200);
    ++seen[a->get_header_value("X-Kiln-Service-Version")];
  }
  EXPECT_NEAR(seen["v2"] / 1000.0, 0.2, 0.05) << seen["v1"] << " / " << seen["v2"];
  ASSERT_EQ(c.call("DELETE", "/api/v1/services/fm/versions/v2").first, 204);
  // Scaled down to one instance and up again, serving all along.
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1", {{"instances", 1}}).first, 200);
  EXPECT_EQ(c.wait_for("fm", [](const json& j) { return j["versions"][0]["instances"].size() == 1; })["state"], "Running");
  EXPECT_EQ(c.http.Post(infer, one, "application/json")->status, 200);
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1", {{"instances", 2}}).first, 200);
  c.wait_for("fm", [](const json& j) { return in_state(j, "Running") && j["versions"][0]["instances"].size() == 2; });
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1", {{"weight", 100}}).first, 200);

  // A rolling update of v1 from model version 1 to 2 under a steady client loop.
  const float old_answer = first_output(c.http.Post(infer, one, "application/json"));
  std::atomic<bool> done{false};
  std::atomic<int> failed{0}, answered{0}, new_answers{0};
  std::thread load([&] {
    Client own(s.port, token);
    const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done && std::chrono::steady_clock::now() < stop_at) {
      auto a = own.http.Post(infer, one, "application/json");
      if (!a || a->status != 200) {
        ++failed;
        continue;
      }
      ++answered;
      if (std::abs(first_output(a) - old_answer) > 1e-6) ++new_answers;
    }
  });
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1", {{"model", "m/2"}}).first, 200);
  c.wait_for("fm", [](const json& j) {
    return in_state(j, "Running") && j["versions"][0]["model_version"] == "m/2" && j["versions"][0]["instances"].size() == 2;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  done = true;
  load.join();
  EXPECT_EQ(failed, 0) << answered << " answered";
  EXPECT_GT(new_answers, 0) << "answers switched to version 2's";
  EXPECT_EQ(json::parse(c.http.Post(infer, one, "application/json")->body)["model_version"], "2");
  json metrics = c.call("GET", "/api/v1/services/fm/metrics").second;
  EXPECT_GE(metrics["versions"]["v1"]["requests"].get<int64_t>(), 800) << metrics.dump();
  EXPECT_EQ(metrics["instances_scraped"], 2);
  bool counted = false;  // the instances' own Prometheus counters, summed
  for (auto& [series, value] : metrics["instances"].items())
    counted |= series.rfind("kiln_inference_requests_total", 0) == 0 && value.get<double>() > 0;
  EXPECT_TRUE(counted) << metrics["instances"].dump();
}

TEST(StudioServices, DeadInstancesComeBackAndAStudioRestartKeepsServices) {
  auto dir = fresh_dir("services_restart");
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  auto s = std::make_unique<Studio>(dir);
  Client c(s->port, token);
  register_model(c, cnn_onnx(1));
  ASSERT_EQ(c.call_json("POST", "/api/v1/services", {{"name", "fm"}, {"versions", {{{"model", "m/1"}, {"instances", 2}, {"max_batch", 0}}}}}).first, 201);
  json svc = c.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  const std::string infer = "/api/v1/services/fm/v2/models/fm/infer";
  const std::string one = infer_body(1).dump();

  // SIGKILL one instance: Concerning, requests still answered, then back to Running.
  const pid_t victim = svc["versions"][0]["instances"][0]["pid"];
  ::kill(victim, SIGKILL);
  int failed = 0;
  bool concerning = false;
  for (int i = 0; i < 2000; ++i) {
    auto a = c.http.Post(infer, one, "application/json");
    if (!a || a->status != 200) ++failed;
    json now = c.call("GET", "/api/v1/services/fm").second;
    concerning |= now["state"] == "Concerning";
    if (concerning && now["state"] == "Running") break;
  }
  EXPECT_TRUE(concerning);
  EXPECT_EQ(failed, 0);
  svc = c.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  EXPECT_EQ(svc["versions"][0]["instances"][0]["restarts"], 1);
  auto log = c.http.Get("/api/v1/services/fm/instances/" + svc["versions"][0]["instances"][0]["id"].dump() + "/logs");
  EXPECT_NE(log->body.find("ready on 127.0.0.1:"), std::string::npos) << log->body;
  const std::string logs = "/api/v1/services/fm/instances/" + svc["versions"][0]["instances"][0]["id"].dump() + "/logs";
  auto found = c.http.Get(logs + "?grep=ready%20on");
  std::istringstream lines(found->body);
  int matched = 0;
  for (std::string line; std::getline(lines, line); ++matched) EXPECT_NE(line.find("ready on"), std::string::npos) << line;
  EXPECT_GE(matched, 1);
  EXPECT_TRUE(c.http.Get(logs + "?grep=no%20such%20line")->body.empty());

  // The studio stops (and its instances with it); started again, the service comes back.
  std::vector<pid_t> pids;
  for (auto& i : svc["versions"][0]["instances"]) pids.push_back(i["pid"]);
  s.reset();
  for (pid_t p : pids) EXPECT_NE(::kill(p, 0), 0) << "instance " << p << " outlived its studio";
  s = std::make_unique<Studio>(dir);
  Client again(s->port, token);
  again.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  EXPECT_EQ(again.http.Post(infer, one, "application/json")->status, 200);

  // Stop, then delete; a running service is not deleted.
  EXPECT_EQ(again.call("DELETE", "/api/v1/services/fm").first, 409);
  ASSERT_EQ(again.call("POST", "/api/v1/services/fm/stop").first, 202);
  svc = again.wait_for("fm", [](const json& j) { return in_state(j, "Stopped"); });
  auto refused = again.http.Post(infer, one, "application/json");
  EXPECT_EQ(refused->status, 503);
  EXPECT_NE(refused->body.find("it is Stopped"), std::string::npos) << refused->body;
  EXPECT_EQ(again.call("DELETE", "/api/v1/services/fm").first, 204);
  EXPECT_EQ(again.call("GET", "/api/v1/services/fm").first, 404);
}

// The proxy passes inference and metadata to a read token; the repository's
// routes need an admin token and are audited; the instances want the token
// only the proxy has; and an instance whose model is gone, or that is
// frozen, is taken out of routing and started again.
TEST(StudioServices, TheProxyGuardsItsInstancesAndProbesSeeUnloadedAndFrozenOnes) {
  auto dir = fresh_dir("services_guard");
  Studio s(dir);
  Client writer(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  Client viewer(s.port, kiln::testing::create_token(dir, "viewer", studio::Scope::Read));
  Client admin(s.port, kiln::testing::create_token(dir, "boss", studio::Scope::Admin));
  register_model(writer, cnn_onnx(1));
  ASSERT_EQ(writer.call_json("POST", "/api/v1/services",
                             {{"name", "fm"}, {"versions", {{{"model", "m/1"}, {"instances", 2}, {"max_batch", 0}}}}}).first, 201);
  json svc = writer.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  const std::string base = "/api/v1/services/fm/v2/";
  const std::string one = infer_body(1).dump();

  EXPECT_EQ(viewer.http.Post(base + "models/fm/infer", one, "application/json")->status, 200);
  EXPECT_EQ(viewer.call("GET", base + "models/fm").first, 200);
  auto refused = viewer.call("POST", base + "repository/models/fm/unload");
  EXPECT_EQ(refused.first, 403) << refused.second.dump();
  EXPECT_EQ(writer.call("POST", base + "repository/models/fm/unload").first, 403);
  EXPECT_EQ(viewer.call("GET", base + "../../metrics").first, 404);
  EXPECT_EQ(viewer.call("GET", "/api/v1/services/fm/v2/health/../../../tokens").first, 404);
  EXPECT_EQ(viewer.call("GET", base + "models/fm/infer").first, 404);
  EXPECT_EQ(writer.call("DELETE", base + "models/fm").first, 404);
  for (auto& i : svc["versions"][0]["instances"]) {
    httplib::Client direct("127.0.0.1", i["port"].get<int>());
    auto r = direct.Post("/v2/models/fm/infer", one, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << "an instance answered without the proxy's token";
  }

  // An admin may unload through the proxy, and it is audited.
  auto unloaded = admin.call("POST", base + "repository/models/fm/unload");
  EXPECT_EQ(unloaded.first, 200) << unloaded.second.dump();
  json audit = admin.call("GET", "/api/v1/audit?limit=20").second;
  bool recorded = false;
  for (auto& e : audit["entries"])
    recorded |= e["token"] == "boss" && e["path"].get<std::string>().find("/unload") != std::string::npos;
  EXPECT_TRUE(recorded) << audit.dump();

  // The instance that unloaded leaves the routing; requests go to the other;
  // then it is started again.
  int failed = 0;
  auto serve_until = [&](const std::function<bool(const json&)>& pred, bool send = true) {
    for (int i = 0; i < 600; ++i) {
      if (send) {
        auto a = viewer.http.Post(base + "models/fm/infer", one, "application/json");
        if (!a || a->status != 200) ++failed;
      }
      json now = writer.call("GET", "/api/v1/services/fm").second;
      if (pred(now)) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "the service never got there";
    return json();
  };
  auto restarts = [](const json& j) {
    int n = 0;
    for (auto& i : j["versions"][0]["instances"]) n += i["restarts"].get<int>();
    return n;
  };
  const auto unload_seen = std::chrono::steady_clock::now();
  serve_until([](const json& j) { return in_state(j, "Concerning"); });
  EXPECT_LT(std::chrono::steady_clock::now() - unload_seen, std::chrono::seconds(4));
  svc = serve_until([&](const json& j) { return in_state(j, "Running") && restarts(j) == 1; });
  EXPECT_EQ(failed, 0) << "requests failed while an instance had unloaded its model";

  // A frozen instance: the same (no request is sent until the probe has
  // seen it: one routed to it before would wait for the proxy's timeout).
  const pid_t frozen = svc["versions"][0]["instances"][1]["pid"];
  ::kill(frozen, SIGSTOP);
  const auto froze = std::chrono::steady_clock::now();
  serve_until([](const json& j) { return in_state(j, "Concerning"); }, false);
  EXPECT_LT(std::chrono::steady_clock::now() - froze, std::chrono::seconds(5));
  serve_until([&](const json& j) { return in_state(j, "Running") && restarts(j) == 2; });
  EXPECT_NE(::kill(frozen, 0), 0) << "the frozen instance was not stopped";
  EXPECT_EQ(failed, 0) << "requests failed while an instance was frozen";
}

TEST(StudioServices, InstancesThatCannotStartFailTheServiceWithTheirLog) {
  auto dir = fresh_dir("services_failed");
  // /bin/false stands in for a kiln that cannot serve.
  Studio s(dir, size_t{1} << 30, "/bin/false");
  Client c(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  register_model(c, cnn_onnx(1));
  ASSERT_EQ(c.call_json("POST", "/api/v1/services", {{"name", "fm"}, {"versions", {{{"model", "m/1"}}}}}).first, 201);
  json svc = c.wait_for("fm", [](const json& j) { return in_state(j, "Failed"); });
  EXPECT_NE(svc["reason"].get<std::string>().find("exited 3 times before it was ready"), std::string::npos) << svc.dump();
  EXPECT_EQ(c.http.Post("/api/v1/services/fm/v2/models/fm/infer", infer_body(1).dump(), "application/json")->status, 503);
}

// A version that scales with its load: up under concurrent clients (requests
// in flight), back down once they stop, up again on latency alone; probes
// that run an inference; the request log with the sampled payloads.
TEST(StudioServices, VersionsScaleWithTheirLoadAndRequestsAreLogged) {
  auto dir = fresh_dir("services_autoscale");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  Client c(s.port, token);
  register_model(c, cnn_onnx(1));
  // Bounds that cannot hold, and a share of payloads that is not one, are refused.
  auto bad = c.call_json("POST", "/api/v1/services",
                         {{"name", "fm"}, {"versions", {{{"model", "m/1"}, {"min_instances", 3}, {"max_instances", 2}}}}});
  EXPECT_EQ(bad.first, 400);
  EXPECT_NE(bad.second.dump().find("must be at least \\\"min_instances\\\" (3)"), std::string::npos) << bad.second.dump();
  bad = c.call_json("POST", "/api/v1/services", {{"name", "fm"}, {"log_payloads", 2}, {"versions", {{{"model", "m/1"}}}}});
  EXPECT_EQ(bad.first, 400);
  EXPECT_NE(bad.second.dump().find("log_payloads"), std::string::npos) << bad.second.dump();

  auto deployed = s.kiln(token, dir, "service deploy fm --model m/1 --min-instances 1 --max-instances 3 "
                                     "--target-outstanding 1 --scale-down-after 1 --log-payloads 1 --spec cpu-1");
  ASSERT_EQ(deployed.first, 0) << deployed.second;
  EXPECT_NE(deployed.second.find("autoscale 1..3 instances"), std::string::npos) << deployed.second;
  auto instances = [](const json& j) { return j["versions"][0]["instances"].size(); };
  json svc = c.wait_for("fm", [](const json& j) { return in_state(j, "Running"); });
  ASSERT_EQ(instances(svc), 1u);
  EXPECT_EQ(svc["versions"][0]["probe"], "inference");
  // Its instances start on the spec: one thread each, in a memory cgroup of 4 GB where the machine has them.
  EXPECT_EQ(svc["versions"][0]["threads"], 1);
  EXPECT_EQ(svc["versions"][0]["memory_mb"], 4096);
  std::string why;
  if (studio::MemoryCgroup::create("kiln-test-probe-" + std::to_string(::getpid()), 64, &why)) {
    const int pid = svc["versions"][0]["instances"][0]["pid"];
    EXPECT_NE(kiln::testing::text_of("/proc/" + std::to_string(pid) + "/cgroup").find("kiln-service-fm-"),
              std::string::npos);
  }
  // Its probe ran an inference before any client sent one.
  json metrics = c.call("GET", "/api/v1/services/fm/metrics").second;
  double probed = 0;
  for (auto& [series, value] : metrics["instances"].items())
    if (series.rfind("kiln_inference_requests_total", 0) == 0) probed += value.get<double>();
  EXPECT_GT(probed, 0) << metrics.dump();
  EXPECT_EQ(metrics["versions"]["v1"]["requests"], 0);

  // Six clients at once: more requests in flight than one instance wants.
  const std::string infer = "/api/v1/services/fm/v2/models/fm/infer";
  const std::string one = infer_body(1).dump();
  std::atomic<bool> done{false};
  std::atomic<int> failed{0}, answered{0};
  auto clients = [&](int n) {
    std::vector<std::thread> threads;
    for (int t = 0; t < n; ++t)
      threads.emplace_back([&] {
        Client own(s.port, token);
        const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!done && std::chrono::steady_clock::now() < stop_at) {
          auto a = own.http.Post(infer, one, "application/json");
          (a && a->status == 200 ? answered : failed)++;
        }
      });
    return threads;
  };
  auto load = clients(6);
  svc = c.wait_for("fm", [&](const json& j) { return in_state(j, "Running") && instances(j) == 3; });
  done = true;
  for (auto& t : load) t.join();
  EXPECT_EQ(failed, 0) << answered << " answered";
  ASSERT_FALSE(svc["events"].empty()) << svc.dump();
  EXPECT_NE(svc["events"][0]["reason"].get<std::string>().find("requests in flight"), std::string::npos) << svc.dump();
  // Idle, it goes back to its minimum, one instance a second.
  svc = c.wait_for("fm", [&](const json& j) { return in_state(j, "Running") && instances(j) == 1; });
  EXPECT_GE(svc["events"].size(), 3u) << svc.dump();

  // On latency alone: a target no request can meet adds instances one at a
  // time under a single client.
  ASSERT_EQ(c.call_json("PUT", "/api/v1/services/fm/versions/v1",
                        {{"target_outstanding", 1000}, {"target_latency_ms", 0.001}}).first, 200);
  done = false;
  load = clients(1);
  svc = c.wait_for("fm", [&](const json& j) { return in_state(j, "Running") && instances(j) == 3; });
  done = true;
  for (auto& t : load) t.join();
  EXPECT_NE(svc["events"].back()["reason"].get<std::string>().find("mean latency"), std::string::npos) << svc.dump();
  EXPECT_EQ(failed, 0);

  // The request log: newest first, with the payloads (all of them sampled here).
  json log = c.call("GET", "/api/v1/services/fm/requests?limit=5").second;
  ASSERT_EQ(log["requests"].size(), 5u) << log.dump().substr(0, 500);
  EXPECT_EQ(log["logged"].get<int64_t>(), answered.load());
  const json& last = log["requests"][0];
  EXPECT_EQ(last["status"], 200);
  EXPECT_EQ(last["path"], infer);
  EXPECT_EQ(last["request"]["inputs"][0]["shape"], json({1, 1, 28, 28}));
  EXPECT_EQ(last["response"]["outputs"][0]["shape"], json({1, 10}));
  EXPECT_GE(log["requests"][0]["time_ms"].get<int64_t>(), log["requests"][4]["time_ms"].get<int64_t>());
  auto listed = s.kiln(token, dir, "service requests fm --limit 3");
  ASSERT_EQ(listed.first, 0) << listed.second;
  EXPECT_NE(listed.second.find("(payloads)"), std::string::npos) << listed.second;
  EXPECT_EQ(c.call("GET", "/api/v1/services/fm/requests?limit=many").first, 400);
}

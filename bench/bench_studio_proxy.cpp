// What the studio's service endpoint adds to a request at concurrency 1: the
// p50 of a batch-1 OIP JSON infer request sent to a service's instance
// through /api/v1/services/NAME/v2/..., next to the p50 of the same request
// sent to that instance directly, in the same run. Goal: under 100 us.
// Usage: bench_studio_proxy KILN_EXECUTABLE MODEL.onnx [REQUESTS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/runtime.h"
#include "kiln/studio.h"
#include "raw_client.h"

using namespace kiln;
using json = nlohmann::json;


int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s KILN_EXECUTABLE MODEL.onnx [REQUESTS]\n", argv[0]);
    return 2;
  }
  const int n = argc > 3 ? std::atoi(argv[3]) : 2000;
  const std::string dir = std::filesystem::temp_directory_path() / ("kiln_bench_proxy_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  studio::StudioOptions o;
  o.data_dir = dir;
  o.port = 0;
  o.access_log = "";
  o.kiln_executable = argv[1];
  studio::StudioServer studio(o);
  const int port = studio.start();
  const std::string token = studio::create_token(dir, "bench", studio::Scope::Write);
  const std::string auth = "Authorization: Bearer " + token + "\r\n";
  RawClient admin(port);
  std::ifstream f(argv[2], std::ios::binary);
  std::string model((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto reply = [](const std::string& r) { return json::parse(r.substr(r.find("\r\n\r\n") + 4)); };
  admin.send(RawClient::request("POST", "/api/v1/models/bench/versions", auth + "Content-Type: application/octet-stream\r\n",
                                model),
             true);
  json version = json::object();
  for (int i = 0; i < 300 && version.value("state", "PENDING") == "PENDING"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    version = reply(admin.send(RawClient::request("GET", "/api/v1/models/bench/versions/1", auth, "")));
  }
  json spec = {{"name", "bench"}, {"versions", {{{"model", "bench/1"}, {"instances", 1}, {"max_batch", 0}}}}};
  admin.send(RawClient::request("POST", "/api/v1/services", auth + "Content-Type: application/json\r\n", spec.dump()),
             true);
  json service = json::object();
  for (int i = 0; i < 600 && service.value("state", "") != "Running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    service = reply(admin.send(RawClient::request("GET", "/api/v1/services/bench", auth, "")));
  }
  if (service["state"] != "Running") {
    std::fprintf(stderr, "the service did not start: %s (model: %s)\n", service.dump().c_str(), version.dump().c_str());
    return 1;
  }
  const int instance_port = service["versions"][0]["instances"][0]["port"];
  // Instances want their version's token, which only the studio holds: the
  // direct requests read it from the version's folder.
  std::string instance_token;
  std::ifstream(dir + "/services/bench/v1-g1/token") >> instance_token;
  const std::string instance_auth = "Authorization: Bearer " + instance_token + "\r\n";

  InferenceSession session(argv[2]);
  const auto& in = session.inputs()[0];
  json shape = json::array();
  int64_t count = 1;
  for (size_t d = 0; d < in.shape.size(); ++d) {
    int64_t size = in.shape[d] > 0 && (d >= in.dim_names.size() || in.dim_names[d].empty()) ? in.shape[d] : 1;
    shape.push_back(size);
    count *= size;
  }
  json body = {{"inputs", {{{"name", in.name}, {"shape", shape}, {"datatype", "FP32"},
                            {"data", std::vector<float>(static_cast<size_t>(count), 0.5f)}}}}};
  const std::string direct_request =
      RawClient::request("POST", "/v2/models/bench/infer", instance_auth + "Content-Type: application/json\r\n", body.dump());
  const std::string proxy_request = RawClient::request(
      "POST", "/api/v1/services/bench/v2/models/bench/infer", auth + "Content-Type: application/json\r\n", body.dump());
  RawClient direct(instance_port), proxied(port);
  time_requests(direct, direct_request, 200);  // warm both paths
  time_requests(proxied, proxy_request, 200);
  std::vector<double> a, b;
  for (int round = 0; round < 4; ++round) {  // alternating, so both see the same machine
    auto x = time_requests(direct, direct_request, n / 4);
    auto y = time_requests(proxied, proxy_request, n / 4);
    a.insert(a.end(), x.begin(), x.end());
    b.insert(b.end(), y.begin(), y.end());
  }
  const double d = p50(a), p = p50(b);
  std::printf("p50 direct to the instance  %8.1f us\n", d);
  std::printf("p50 through the studio      %8.1f us\n", p);
  std::printf("proxy overhead              %8.1f us (goal: under 100 us), ratio %.2f\n", p - d, p / d);
  // Where it goes: the studio's transport alone, with a token check, and a
  // request with no model run, direct and forwarded.
  const std::string health = RawClient::request("GET", "/api/v1/health", "", "");
  const std::string with_token = RawClient::request("GET", "/api/v1/services/bench", auth, "");
  const std::string live = RawClient::request("GET", "/v2/health/live", instance_auth, "");
  const std::string live_proxied = RawClient::request("GET", "/api/v1/services/bench/v2/health/live", auth, "");
  std::printf("  studio GET /api/v1/health (transport):        %6.1f us\n", p50(time_requests(proxied, health, n / 4)));
  std::printf("  studio GET a service (token check, route):    %6.1f us\n", p50(time_requests(proxied, with_token, n / 4)));
  std::printf("  instance GET /v2/health/live, direct:         %6.1f us\n", p50(time_requests(direct, live, n / 4)));
  std::printf("  instance GET /v2/health/live, through studio: %6.1f us\n", p50(time_requests(proxied, live_proxied, n / 4)));
  std::filesystem::remove_all(dir);
  return 0;
}

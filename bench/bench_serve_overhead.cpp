// What kiln serve adds to a bare InferenceSession::run at concurrency 1: the
// p50 of a W2 request (batch 1) over loopback HTTP, JSON and binary tensors,
// next to the p50 of the same run without the server.
// Usage: bench_serve_overhead MODEL.onnx [REQUESTS] [PORT]
// With PORT, the requests go to a `kiln serve --model MODEL.onnx` already
// running there (its own process, as in production); without, to a server
// started in this process.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "kiln/serve.h"

using namespace kiln;
using json = nlohmann::json;

namespace {

// The median of n calls of f: their wall time, or what f returns when it
// times a part of itself.
template <typename F>
double p50_us(int n, F f) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if constexpr (std::is_same_v<decltype(f()), double>) {
      t.push_back(f());
    } else {
      f();
      t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [REQUESTS]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  Tensor x = rand({1, 1, 28, 28});

  double bare = 0;
  {
    InferenceSession session(model);
    for (int i = 0; i < 50; ++i) session.run({x});
    bare = p50_us(n, [&] { session.run({x}); });
  }
  ServeOptions o;
  o.model = model;
  o.port = 0;
  o.host = "127.0.0.1";
  o.access_log = "";
  std::unique_ptr<Server> server;
  int port = argc > 3 ? std::atoi(argv[3]) : 0;
  if (port == 0) {
    server = std::make_unique<Server>(o);
    port = server->start();
  }
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  std::string name = model.substr(model.find_last_of('/') + 1);
  name = name.substr(0, name.find_last_of('.'));
  const std::string path = "/v2/models/" + name + "/infer";
  std::string body = json{{"inputs", {{{"name", "input"}, {"shape", {1, 1, 28, 28}}, {"datatype", "FP32"},
                                       {"data", x.to_vector<float>()}}}}}
                         .dump();
  std::string head = json{{"inputs", {{{"name", "input"}, {"shape", {1, 1, 28, 28}}, {"datatype", "FP32"},
                                       {"parameters", {{"binary_data_size", 784 * 4}}}}}},
                          {"parameters", {{"binary_data_output", true}}}}
                         .dump();
  std::string binary = head + std::string(static_cast<const char*>(x.raw_data()), 784 * 4);
  httplib::Headers h = {{"Inference-Header-Content-Length", std::to_string(head.size())}};
  auto post_json = [&] {
    auto r = client.Post(path, body, "application/json");
    if (!r || r->status != 200) std::abort();
  };
  auto post_binary = [&] {
    auto r = client.Post(path, h, binary, "application/octet-stream");
    if (!r || r->status != 200) std::abort();
  };
  for (int i = 0; i < 50; ++i) post_json(), post_binary();
  double http_json = p50_us(n, post_json), http_binary = p50_us(n, post_binary);
  // The server's own share: time in the infer handler less the time in the model (means, from /metrics).
  std::string metrics = client.Get("/metrics")->body;
  auto sum_of = [&](const std::string& metric) {
    auto at = metrics.find(metric + "_sum{model=\"" + name + "\"} ");
    return at == std::string::npos ? 0.0 : std::stod(metrics.substr(metrics.find("} ", at) + 2));
  };
  auto count_of = [&](const std::string& metric) {
    auto at = metrics.find(metric + "_count{model=\"" + name + "\"} ");
    return at == std::string::npos ? 1.0 : std::stod(metrics.substr(metrics.find("} ", at) + 2));
  };
  double handler_us = 1e6 * (sum_of("kiln_inference_request_seconds") - sum_of("kiln_inference_compute_seconds")) /
                      count_of("kiln_inference_request_seconds");
  if (server) server->shutdown();
  // At concurrency 1 the model runs once per request, after the rest of the
  // request cycle has left its threads idle; a run after an idle gap wakes
  // sleeping OpenMP workers first. The same run, with the same gap before each.
  const auto gap = std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, http_binary - bare)));
  double bare_after_idle = 0;
  {
    InferenceSession session(model);
    for (int i = 0; i < 50; ++i) session.run({x});
    bare_after_idle = p50_us(n, [&] {
      std::this_thread::sleep_for(gap);
      auto t0 = std::chrono::steady_clock::now();
      session.run({x});
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  std::printf("W2 batch 1, p50 of %d runs: bare run %.1f us; server %s\n", n, bare,
              server ? "in this process" : "in its own process");
  std::printf("  HTTP, JSON tensors:   %.1f us, overhead %.1f us (target < 100 us)\n", http_json, http_json - bare);
  std::printf("  HTTP, binary tensors: %.1f us, overhead %.1f us (target < 100 us)\n", http_binary, http_binary - bare);
  std::printf("  inside the server's infer handler, beyond the model run (mean over all requests, JSON and binary): %.1f us\n",
              handler_us);
  std::printf("  bare run after %.0f us idle (as between requests): %.1f us; binary over it: %.1f us, JSON: %.1f us\n",
              static_cast<double>(gap.count()), bare_after_idle, http_binary - bare_after_idle, http_json - bare_after_idle);
  std::printf("  (the HTTP figures include the client and loopback TCP on the same cores)\n");
  return 0;
}

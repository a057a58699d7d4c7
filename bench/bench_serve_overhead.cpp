// What kiln serve adds to a bare InferenceSession::run at concurrency 1: the
// p50 of a W2 request (batch 1) over loopback HTTP, JSON and binary tensors,
// next to the p50 of the same run without the server.
// Usage: bench_serve_overhead MODEL.onnx [REQUESTS] [PORT]
// With PORT, the requests go to a `kiln serve --model MODEL.onnx` already
// running there (its own process, as in production); without, to a server
// started in this process.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

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

// A keep-alive HTTP/1.1 client as load generators write them: each request
// is one prebuilt buffer sent with one send, the response read until its
// Content-Length is in. A general-purpose client adds its own tens of
// microseconds, which are not the server's.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawClient() { ::close(fd_); }
  static std::string request(const std::string& method, const std::string& path, const std::string& headers,
                             const std::string& body) {
    std::string r = method;
    r.append(" ").append(path).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n").append(headers);
    r.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n\r\n").append(body);
    return r;
  }
  // Sends a prebuilt request; returns the response (head and body).
  const std::string& send(const std::string& request) {
    if (::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) std::abort();
    response_.clear();
    size_t need = std::string::npos;
    char buf[65536];
    while (need == std::string::npos || response_.size() < need) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) std::abort();
      response_.append(buf, static_cast<size_t>(n));
      size_t head = response_.find("\r\n\r\n");
      size_t length = response_.find("Content-Length: ");
      if (need == std::string::npos && head != std::string::npos && length < head)
        need = head + 4 + std::stoul(response_.substr(length + 16));
    }
    if (response_.compare(0, 12, "HTTP/1.1 200") != 0) std::abort();
    return response_;
  }

 private:
  int fd_;
  std::string response_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [REQUESTS]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  Tensor x = rand({1, 1, 28, 28});

  // Bare runs go on threads of their own, which take their OpenMP teams with
  // them when they end: teams left behind would make the server's team stop
  // spinning between regions (libgomp does so with more team threads than cores).
  double bare = 0;
  std::thread([&] {
    InferenceSession session(model);
    for (int i = 0; i < 50; ++i) session.run({x});
    bare = p50_us(n, [&] { session.run({x}); });
  }).join();
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
  RawClient client(port);
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
  const std::string json_request = RawClient::request("POST", path, "Content-Type: application/json\r\n", body);
  const std::string binary_request = RawClient::request(
      "POST", path,
      "Content-Type: application/octet-stream\r\nInference-Header-Content-Length: " + std::to_string(head.size()) + "\r\n",
      head + std::string(static_cast<const char*>(x.raw_data()), 784 * 4));
  const std::string live_request = RawClient::request("GET", "/v2/health/live", "", "");
  auto post_json = [&] { client.send(json_request); };
  auto post_binary = [&] { client.send(binary_request); };
  for (int i = 0; i < 50; ++i) post_json(), post_binary();
  double http_json = p50_us(n, post_json), http_binary = p50_us(n, post_binary);
  double live = p50_us(n, [&] { client.send(live_request); });
  // The server's own share: time in the infer handler less the time in the model (means, from /metrics).
  std::string metrics = client.send(RawClient::request("GET", "/metrics", "", ""));
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
  double server_run_us =
      1e6 * sum_of("kiln_inference_compute_seconds") / count_of("kiln_inference_compute_seconds");
  if (server) server->shutdown();
  // At concurrency 1 the model runs once per request, after the rest of the
  // request cycle has left its threads idle; a run after an idle gap wakes
  // sleeping OpenMP workers first. The same run, with the same gap before each.
  const auto gap = std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, http_binary - bare)));
  double bare_after_idle = 0;
  std::thread([&] {
    InferenceSession session(model);
    for (int i = 0; i < 50; ++i) session.run({x});
    bare_after_idle = p50_us(n, [&] {
      std::this_thread::sleep_for(gap);
      auto t0 = std::chrono::steady_clock::now();
      session.run({x});
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    });
  }).join();
  std::printf("W2 batch 1, p50 of %d runs: bare run %.1f us; server %s\n", n, bare,
              server ? "in this process" : "in its own process");
  std::printf("  HTTP, JSON tensors:   %.1f us, overhead %.1f us (target < 100 us)\n", http_json, http_json - bare);
  std::printf("  HTTP, binary tensors: %.1f us, overhead %.1f us (target < 100 us)\n", http_binary, http_binary - bare);
  std::printf("  inside the server's infer handler, beyond the model run (mean over all requests, JSON and binary): %.1f us\n",
              handler_us);
  std::printf("  bare run after %.0f us idle (as between requests): %.1f us; binary over it: %.1f us, JSON: %.1f us\n",
              static_cast<double>(gap.count()), bare_after_idle, http_binary - bare_after_idle, http_json - bare_after_idle);
  std::printf("  the model run inside the server (mean): %.1f us\n", server_run_us);
  std::printf("  GET /v2/health/live round trip (the transport alone): %.1f us\n", live);
  std::printf("  (the HTTP figures include the client and loopback TCP on the same cores)\n");
  return 0;
}

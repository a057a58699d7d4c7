// What kiln serve adds to a bare InferenceSession::run at concurrency 1: the
// p50 of a W2 request (batch 1) over loopback HTTP, JSON and binary tensors,
// next to the p50 of the same run without the server.
// Usage: bench_serve_overhead MODEL.onnx [REQUESTS] [PORT]
// With PORT, the requests go to a `kiln serve --model MODEL.onnx` already
// running there; without, to a server this program forks. Either way the
// server has a process of its own, as in production: in one process the
// bare runs' OpenMP teams and the server's would slow each other.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "kiln/serve.h"
#include "raw_client.h"

using namespace kiln;
using json = nlohmann::json;

namespace {

// Starts a server for the model in a child process; returns its pid and sets the port.
pid_t fork_server(const std::string& model, int& port) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, nullptr);
    ServeOptions o;
    o.model = model;
    o.port = 0;
    o.host = "127.0.0.1";
    o.access_log = "";
    Server server(o);
    int p = server.start();
    if (::write(fds[1], &p, sizeof p) != sizeof p) std::_Exit(1);
    int sig = 0;
    sigwait(&term, &sig);
    server.shutdown();
    std::_Exit(0);
  }
  ::close(fds[1]);
  if (::read(fds[0], &port, sizeof port) != sizeof port) {
    std::fprintf(stderr, "the server did not start\n");
    std::exit(1);
  }
  ::close(fds[0]);
  return pid;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.onnx [REQUESTS]\n", argv[0]);
    return 2;
  }
  const std::string model = argv[1];
  const int n = argc > 2 ? std::atoi(argv[2]) : 2000;
  // Forked before this process runs any OpenMP region: a child inherits
  // libgomp's count of team threads, and more than cores makes it stop spinning.
  int port = argc > 3 ? std::atoi(argv[3]) : 0;
  pid_t server_pid = -1;
  if (port == 0) server_pid = fork_server(model, port);
  Tensor x = rand({1, 1, 28, 28});

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
  for (int i = 0; i < 50; ++i) client.send(json_request), client.send(binary_request);

  // Every kind of sample is taken in each of ten rounds, one after another,
  // so that a busy minute on a shared machine slows all kinds alike.
  const int rounds = 10, per_round = std::max(1, n / rounds);
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto us_since = [&](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::micro>(now() - t0).count();
  };
  // Bare runs go on threads of their own, which take their OpenMP teams with
  // them when they end: teams left behind would make the server's team stop
  // spinning between regions (libgomp does so with more team threads than
  // cores). With a gap, each run follows that much idle time, as a run in the
  // server follows the rest of the request cycle (and wakes sleeping workers).
  std::unique_ptr<InferenceSession> session;
  auto bare_runs = [&](std::chrono::microseconds gap, std::vector<double>& out) {
    std::thread([&] {
      if (!session) session = std::make_unique<InferenceSession>(model);
      for (int i = 0; i < 10; ++i) session->run({x});
      for (int i = 0; i < per_round; ++i) {
        if (gap.count() > 0) std::this_thread::sleep_for(gap);
        auto t0 = now();
        session->run({x});
        out.push_back(us_since(t0));
      }
    }).join();
  };
  auto requests = [&](const std::string& request, std::vector<double>& out) {
    for (int i = 0; i < per_round; ++i) {
      auto t0 = now();
      client.send(request);
      out.push_back(us_since(t0));
    }
  };
  std::vector<double> bare, after_idle, binary, json_requests, live;
  std::chrono::microseconds gap(50);
  for (int r = 0; r < rounds; ++r) {
    // Each block after a pause: OpenMP workers spin for a while after their
    // last region, and would take a core from the next block.
    auto pause = [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); };
    pause(), bare_runs(std::chrono::microseconds(0), bare);
    pause(), requests(binary_request, binary);
    pause(), requests(json_request, json_requests);
    pause(), requests(live_request, live);
    pause(), bare_runs(gap, after_idle);
    gap = std::chrono::microseconds(static_cast<int64_t>(std::max(0.0, p50(binary) - p50(bare))));
  }

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
  double server_run_us = 1e6 * sum_of("kiln_inference_compute_seconds") / count_of("kiln_inference_compute_seconds");
  if (server_pid > 0) {
    ::kill(server_pid, SIGTERM);
    ::waitpid(server_pid, nullptr, 0);
  }

  const double b = p50(bare), idle = p50(after_idle), bin = p50(binary), js = p50(json_requests);
  std::printf("W2 batch 1, p50 of %d of each, interleaved in %d rounds; server %s\n", rounds * per_round, rounds,
              server_pid > 0 ? "forked by this program" : "given by its port");
  std::printf("  bare run: %.1f us back to back, %.1f us after %.0f us idle (as between requests)\n", b, idle,
              static_cast<double>(gap.count()));
  std::printf("  HTTP, binary tensors: %.1f us; over the bare run %.1f us, over the run after idle %.1f us (target < 100 us)\n",
              bin, bin - b, bin - idle);
  std::printf("  HTTP, JSON tensors:   %.1f us; over the bare run %.1f us, over the run after idle %.1f us (target < 100 us)\n",
              js, js - b, js - idle);
  std::printf("  GET /v2/health/live round trip (the transport alone): %.1f us\n", p50(live));
  std::printf("  inside the server (means over all requests): the model run %.1f us, the rest of the infer handler %.1f us\n",
              server_run_us, handler_us);
  std::printf("  (the HTTP figures include the client and loopback TCP on the same cores)\n");
  return 0;
}

// The HTTP side of `kiln serve`: routes of the Open Inference Protocol v2,
// error statuses, the access log, readiness and graceful shutdown.
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/serve.h"
#include "serve/repository.h"

namespace kiln {

using json = nlohmann::json;
using serve::BadRequest;
using serve::ServedModel;
using serve::Unavailable;

struct Server::Impl {
  ServeOptions options;
  httplib::Server http;
  serve::Metrics metrics;
  std::unique_ptr<serve::Repository> repository;
  std::atomic<bool> ready{false};
  std::atomic<int> in_flight{0};
  std::thread listener;
  std::FILE* access_log = nullptr;
  std::mutex log_mu;

  explicit Impl(ServeOptions o) : options(std::move(o)) {}
  void routes();
  void log(const httplib::Request& req, const httplib::Response& res);
};

namespace {

thread_local std::chrono::steady_clock::time_point t_request_start;

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void error(httplib::Response& res, int status, const std::string& message) { reply(res, status, {{"error", message}}); }

json tensor_metadata(const TensorInfo& info) {
  std::vector<int64_t> shape = info.shape;  // -1 for the batch axis (and any other free one)
  return {{"name", info.name}, {"datatype", serve::oip_datatype(info.dtype)}, {"shape", shape}};
}

// Counts a request as in flight while it exists.
struct InFlight {
  std::atomic<int>& n;
  explicit InFlight(std::atomic<int>& count) : n(count) { ++n; }
  ~InFlight() { --n; }
};

}  // namespace

void Server::Impl::log(const httplib::Request& req, const httplib::Response& res) {
  if (!access_log) return;
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_request_start).count();
  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::lock_guard<std::mutex> lock(log_mu);
  std::fprintf(access_log, "%s %s %s %s %d %zu %zu %.3fms\n", when, req.remote_addr.c_str(), req.method.c_str(),
               req.path.c_str(), res.status, req.body.size(), res.body.size(), ms);
  std::fflush(access_log);
}

void Server::Impl::routes() {
  http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { reply(res, 200, {{"live", true}}); });
  http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
    reply(res, ready ? 200 : 503, {{"ready", ready.load()}});
  });
  http.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", {"binary_tensor_data"}}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.text(), "text/plain; version=0.0.4");
  });
  // /v2/models/{name}[/versions/{version}][/ready]
  const char* model_path = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
  auto find = [this](const httplib::Request& req, httplib::Response& res) -> ServedModel* {
    std::string name = req.matches[1], version = req.matches.size() > 2 ? std::string(req.matches[2]) : "";
    ServedModel* m = repository ? repository->find(name, version) : nullptr;
    if (!m) {
      std::string known;
      if (repository)
        for (const auto& [n, versions] : repository->models()) known += (known.empty() ? "" : ", ") + n;
      error(res, 404, "unknown model '" + name + "'" + (version.empty() ? "" : " version " + version) +
                          (known.empty() ? "" : "; served models: " + known));
    }
    return m;
  };
  http.Get(std::string(model_path) + "$", [this, find](const httplib::Request& req, httplib::Response& res) {
    ServedModel* m = find(req, res);
    if (!m) return;
    json inputs = json::array(), outputs = json::array();
    for (const auto& i : m->inputs()) inputs.push_back(tensor_metadata(i));
    for (const auto& o : m->outputs()) outputs.push_back(tensor_metadata(o));
    reply(res, 200, {{"name", m->name()}, {"versions", repository->versions(m->name())}, {"platform", "onnx"},
                     {"inputs", inputs}, {"outputs", outputs}, {"max_batch_size", m->config().max_batch_size}});
  });
  http.Get(std::string(model_path) + "/ready", [this, find](const httplib::Request& req, httplib::Response& res) {
    ServedModel* m = find(req, res);
    if (m) reply(res, ready ? 200 : 503, {{"name", m->name()}, {"ready", ready.load()}});
  });
  http.Post(std::string(model_path) + "/infer", [this, find](const httplib::Request& req, httplib::Response& res) {
    InFlight counted(in_flight);
    auto start = std::chrono::steady_clock::now();
    ServedModel* m = find(req, res);
    if (!m) return;
    serve::ModelMetrics& mm = metrics.model(m->name());
    if (!ready) {
      ++mm.failure;
      return error(res, 503, "the server is not ready (starting or shutting down)");
    }
    try {
      long long header_length = -1;
      if (req.has_header("Inference-Header-Content-Length")) {
        std::string v = req.get_header_value("Inference-Header-Content-Length");
        try {
          header_length = std::stoll(v);
        } catch (const std::exception&) {
          throw BadRequest("Inference-Header-Content-Length '" + v + "' is not a number");
        }
        if (header_length < 0) throw BadRequest("Inference-Header-Content-Length must not be negative");
      }
      serve::InferRequest request = serve::parse_infer_request(req.body, header_length);
      auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(options.request_timeout_s));
      std::vector<Tensor> out = m->infer(request.inputs, timeout);
      std::vector<std::pair<std::string, Tensor>> named;
      std::vector<bool> binary;
      if (request.outputs.empty()) {
        for (size_t i = 0; i < out.size(); ++i) {
          named.emplace_back(m->outputs()[i].name, out[i]);
          binary.push_back(request.binary_by_default);
        }
      } else {
        for (size_t k = 0; k < request.outputs.size(); ++k) {
          size_t i = 0;
          while (i < m->outputs().size() && m->outputs()[i].name != request.outputs[k]) ++i;
          if (i == m->outputs().size()) throw BadRequest("model '" + m->name() + "' has no output '" + request.outputs[k] + "'");
          named.emplace_back(request.outputs[k], out[i]);
          binary.push_back(request.binary_outputs[k]);
        }
      }
      serve::InferResponse r = serve::make_infer_response(m->name(), m->version(), request.id, named, binary);
      if (r.header_length >= 0) {
        res.set_header("Inference-Header-Content-Length", std::to_string(r.header_length));
        res.set_content(r.body, "application/octet-stream");
      } else {
        res.set_content(r.body, "application/json");
      }
      ++mm.success;
      mm.request_seconds.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    } catch (const BadRequest& e) {
      ++mm.failure;
      error(res, 400, e.what());
    } catch (const Unavailable& e) {
      ++mm.failure;
      error(res, 503, e.what());
    } catch (const std::exception& e) {
      ++mm.failure;
      error(res, 500, std::string("inference failed: ") + e.what());
    }
  });
}

Server::Server(ServeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() {
  if (impl_->listener.joinable()) shutdown();
  if (impl_->access_log && impl_->access_log != stderr) std::fclose(impl_->access_log);
}

bool Server::ready() const { return impl_->ready; }

int Server::start() {
  Impl& s = *impl_;
  const ServeOptions& o = s.options;
  KILN_CHECK(o.model.empty() != o.model_repository.empty(), "serve: give either a model file or a model repository");
  if (o.access_log == "-") {
    s.access_log = stderr;
  } else if (!o.access_log.empty()) {
    s.access_log = std::fopen(o.access_log.c_str(), "a");
    KILN_CHECK(s.access_log, "serve: cannot open the access log '", o.access_log, "' for appending");
  }
  const int threads = o.http_threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(o.max_body_bytes);
  s.http.set_keep_alive_max_count(100000);
  s.http.set_tcp_nodelay(true);  // small responses go out at once, not after a delayed ACK
  s.http.set_read_timeout(30, 0);
  s.http.set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
    t_request_start = std::chrono::steady_clock::now();
    ++impl_->metrics.http_requests;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.http.set_logger([this](const httplib::Request& req, const httplib::Response& res) { impl_->log(req, res); });
  s.http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) return error(res, 413, "the request body is larger than the server accepts");
    if (res.status == 404) return error(res, 404, "no such endpoint; see /v2 and /v2/models/{model}");
    error(res, res.status, "request failed");
  });
  s.routes();
  int listen_fd = -1;
  s.http.set_socket_options([&listen_fd](socket_t sock) {  // the listening socket, before bind
    httplib::default_socket_options(sock);
    listen_fd = sock;
  });
  int port = o.port == 0 ? s.http.bind_to_any_port(o.host) : (s.http.bind_to_port(o.host, o.port) ? o.port : -1);
  KILN_CHECK(port > 0, "serve: cannot listen on ", o.host, ":", o.port, " (in use, or not allowed)");
  // cpp-httplib listens with a backlog of 5: a burst of new connections
  // overflows it and clients see resets. Listening again raises the backlog.
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  s.listener = std::thread([this] { impl_->http.listen_after_bind(); });
  // Live before the models load; stop() before the loop runs would be lost.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!s.http.is_running() && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!s.http.is_running()) {
    s.listener.join();
    KILN_FAIL("serve: the listener on ", o.host, ":", port, " did not start");
  }
  try {
    s.repository = std::make_unique<serve::Repository>(o.model, o.model_repository, s.metrics);
  } catch (...) {
    s.http.stop();
    s.listener.join();
    throw;
  }
  s.ready = true;
  return port;
}

void Server::shutdown() {
  Impl& s = *impl_;
  s.ready = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.options.drain_timeout_s);
  while (s.in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.http.stop();
  if (s.listener.joinable()) s.listener.join();
}

int run_server(const ServeOptions& options) {
  // SIGTERM and SIGINT are taken by sigwait below, not by any thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Server server(options);
  int port = server.start();
  std::fprintf(stderr, "kiln serve: ready on %s:%d\n", options.host.c_str(), port);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kiln serve: %s received; finishing in-flight requests\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.shutdown();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

}  // namespace kiln

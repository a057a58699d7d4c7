// The HTTP side of `kiln serve`: routes of the Open Inference Protocol v2,
// error statuses, the access log, readiness and graceful shutdown.
#include <signal.h>

#include <atomic>
#include <cctype>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/op_library.h"
#include "kiln/serve.h"
#include "serve/http_server.h"
#include "serve/repository.h"

namespace kiln {

using json = nlohmann::json;
using serve::BadRequest;
using serve::HttpRequest;
using serve::HttpResponse;
using serve::ServedModel;
using serve::Unavailable;

struct Server::Impl {
  ServeOptions options;
  std::unique_ptr<serve::HttpServer> http;
  serve::Metrics metrics;
  std::unique_ptr<serve::Repository> repository;
  std::atomic<bool> ready{false};
  std::atomic<bool> loaded{false};  // `repository` is set (it is read only after this)
  std::atomic<int> in_flight{0};
  // Inference requests being handled, for the lines of those a stop cuts off.
  std::mutex flights_mu;
  std::map<const HttpRequest*, std::chrono::steady_clock::time_point> flights;
  std::FILE* access_log = nullptr;
  std::mutex log_mu;
  std::string auth_token;  // empty: no authentication
  // The repository poll (--repository-poll-secs).
  std::thread poller;
  std::mutex poll_mu;
  std::condition_variable poll_cv;
  bool stop_polling = false;

  explicit Impl(ServeOptions o) : options(std::move(o)) {}
  // Whether the request may go on (the token, when one is set); otherwise res has the 401.
  bool admitted(const HttpRequest& req, HttpResponse& res) const;
  void handle(const HttpRequest& req, HttpResponse& res);
  void model_route(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts);
  void repository_route(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts);
  void poll_loop();
  void infer(const HttpRequest& req, HttpResponse& res, ServedModel& m);
  void log(const HttpRequest& req, const HttpResponse& res, double seconds);
};

namespace {

void reply(HttpResponse& res, int status, const json& body) {
  res.status = status;
  res.body = body.dump(-1, ' ', false, json::error_handler_t::replace);  // names on disk need not be UTF-8
}

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

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at < path.size()) {
    size_t next = path.find('/', at);
    if (next == std::string::npos) next = path.size();
    if (next > at) parts.push_back(path.substr(at, next - at));
    at = next + 1;
  }
  return parts;
}

// True when the method is the one the route takes; otherwise answers 405.
bool method_is(const HttpRequest& req, HttpResponse& res, const char* method) {
  if (req.method == method) return true;
  serve::set_error(res, 405, req.method + " is not allowed on " + req.path + "; use " + method);
  res.headers.emplace_back("Allow", method);
  return false;
}

// Compares the whole token whatever the first difference, so the time taken
// says nothing about how much of a guess was right.
bool authorized(const HttpRequest& req, const std::string& token) {
  const std::string* value = req.header("Authorization");
  const std::string prefix = "Bearer ";
  if (!value || value->size() != prefix.size() + token.size() || value->compare(0, prefix.size(), prefix) != 0)
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>((*value)[prefix.size() + i] ^ token[i]);
  return diff == 0;
}

std::string read_token(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f.good(), "serve: cannot read the token file '", path, "'");
  std::string token((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.front()))) token.erase(token.begin());
  KILN_CHECK(token.size() >= 16 && token.find_first_of(" \t\r\n") == std::string::npos, "serve: the token in '", path,
             "' must be one word of at least 16 characters (e.g. the output of 'openssl rand -hex 32')");
  return token;
}

}  // namespace

void Server::Impl::log(const HttpRequest& req, const HttpResponse& res, double seconds) {
  metrics.count_response(res.status);
  if (!access_log) return;
  std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::lock_guard<std::mutex> lock(log_mu);
  // Method and path come from the client: escaped, so they cannot start a line of their own.
  const std::string method = req.method.empty() ? "-" : serve::log_field(req.method);
  const std::string path = req.path.empty() ? "-" : serve::log_field(req.path);
  std::fprintf(access_log, "%s %s %s %s %d %zu %zu %.3fms\n", when, req.remote_addr.c_str(), method.c_str(),
               path.c_str(), res.status, req.body.size(), res.body.size(), seconds * 1e3);
  std::fflush(access_log);
}

bool Server::Impl::admitted(const HttpRequest& req, HttpResponse& res) const {
  if (auth_token.empty() || req.path == "/v2/health/live" || req.path == "/v2/health/ready" ||
      authorized(req, auth_token))
    return true;
  serve::set_error(res, 401, "this server needs \"Authorization: Bearer <token>\" (the token of --auth-token-file)");
  res.headers.emplace_back("WWW-Authenticate", "Bearer");
  return false;
}

void Server::Impl::handle(const HttpRequest& req, HttpResponse& res) {
  ++metrics.http_requests;
  const std::vector<std::string> parts = split_path(req.path);
  auto is = [&](std::initializer_list<const char*> route) {
    return parts.size() == route.size() && std::equal(route.begin(), route.end(), parts.begin());
  };
  if (!admitted(req, res)) return;
  if (is({"v2", "health", "live"})) {
    if (method_is(req, res, "GET")) reply(res, 200, {{"live", true}});
  } else if (is({"v2", "health", "ready"})) {
    if (method_is(req, res, "GET")) reply(res, ready ? 200 : 503, {{"ready", ready.load()}});
  } else if (is({"v2"})) {
    if (method_is(req, res, "GET"))
      reply(res, 200, {{"name", "kiln"}, {"version", KILN_VERSION}, {"extensions", {"binary_tensor_data"}}});
  } else if (is({"metrics"})) {
    if (!method_is(req, res, "GET")) return;
    res.content_type = "text/plain; version=0.0.4";
    res.body = metrics.text();
  } else if (parts.size() >= 3 && parts[0] == "v2" && (parts[1] == "models" || parts[1] == "repository")) {
    if (!loaded) return serve::set_error(res, 503, "the server is loading its models; try again when /v2/health/ready says so");
    if (parts[1] == "models") return model_route(req, res, parts);
    repository_route(req, res, parts);
  } else {
    serve::set_error(res, 404, "no such endpoint: " + req.path + "; see /v2 and /v2/models/{model}");
  }
}

// /v2/models/{name}[/versions/{version}][/ready | /infer]
void Server::Impl::model_route(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts) {
  const std::string& name = parts[2];
  size_t at = 3;
  std::string version;
  if (parts.size() >= 5 && parts[3] == "versions") {
    version = parts[4];
    at = 5;
  }
  std::string action = parts.size() == at + 1 ? parts[at] : "";
  if (parts.size() > at + 1 || (parts.size() == at + 1 && action != "ready" && action != "infer"))
    return serve::set_error(res, 404, "no such endpoint: " + req.path +
                                          "; model routes are /v2/models/{model}[/versions/{version}][/ready|/infer]");
  std::shared_ptr<ServedModel> m = repository->find(name, version);
  if (!m) {
    std::string known;
    for (const auto& n : repository->loaded_names()) known += (known.empty() ? "" : ", ") + n;
    return serve::set_error(res, 404, "unknown model '" + name + "'" + (version.empty() ? "" : " version " + version) +
                                          (known.empty() ? "" : "; served models: " + known));
  }
  if (action == "infer") {
    if (method_is(req, res, "POST")) infer(req, res, *m);  // m keeps the version alive through a reload
  } else if (action == "ready") {
    if (method_is(req, res, "GET")) reply(res, ready ? 200 : 503, {{"name", m->name()}, {"ready", ready.load()}});
  } else if (method_is(req, res, "GET")) {
    json inputs = json::array(), outputs = json::array();
    for (const auto& i : m->inputs()) inputs.push_back(tensor_metadata(i));
    for (const auto& o : m->outputs()) outputs.push_back(tensor_metadata(o));
    reply(res, 200, {{"name", m->name()}, {"versions", repository->versions(m->name())}, {"platform", "onnx"},
                     {"inputs", inputs}, {"outputs", outputs}, {"max_batch_size", m->config().max_batch_size}});
  }
}

// /v2/repository/index, /v2/repository/models/{name}/load and .../unload
// (Triton's model repository extension).
void Server::Impl::repository_route(const HttpRequest& req, HttpResponse& res, const std::vector<std::string>& parts) {
  const bool index = parts.size() == 3 && parts[2] == "index";
  const bool change = parts.size() == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload");
  if (!index && !change)
    return serve::set_error(res, 404, "no such endpoint: " + req.path +
                                          "; repository routes are /v2/repository/index and "
                                          "/v2/repository/models/{model}/load|unload");
  if (!method_is(req, res, "POST")) return;
  try {
    if (index) {
      // An optional body {"ready": true} keeps only the loaded versions.
      bool only_ready = false;
      if (!req.body.empty()) {
        json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded() || !body.is_object())
          throw BadRequest("the index request's body must be a JSON object such as {\"ready\": true}, or empty");
        if (body.contains("ready")) {
          if (!body["ready"].is_boolean()) throw BadRequest("\"ready\" must be true or false");
          only_ready = body["ready"].get<bool>();
        }
      }
      json out = json::array();
      for (const auto& e : repository->index()) {
        if (only_ready && e.state != "READY") continue;
        json line = {{"name", e.name}, {"state", e.state}};
        if (!e.version.empty()) line["version"] = e.version;
        if (!e.reason.empty()) line["reason"] = e.reason;
        out.push_back(line);
      }
      return reply(res, 200, out);
    }
    const std::string& name = parts[3];
    if (parts[4] == "load") {
      repository->load(name);
      std::string versions;
      for (const auto& v : repository->versions(name)) versions += (versions.empty() ? "" : ", ") + v;
      std::fprintf(stderr, "kiln serve: model '%s' loaded (versions %s)\n", name.c_str(), versions.c_str());
    } else {
      repository->unload(name);
      std::fprintf(stderr, "kiln serve: model '%s' unloaded\n", name.c_str());
    }
    reply(res, 200, json::object());
  } catch (const BadRequest& e) {
    serve::set_error(res, 400, e.what());
  } catch (const serve::RepositoryError& e) {
    serve::set_error(res, 400, e.what());
  }
}

void Server::Impl::poll_loop() {
  const auto every = std::chrono::duration<double>(options.repository_poll_s);
  std::unique_lock<std::mutex> lock(poll_mu);
  while (!poll_cv.wait_for(lock, every, [this] { return stop_polling; })) {
    lock.unlock();
    for (const auto& line : repository->poll()) std::fprintf(stderr, "kiln serve: %s\n", line.c_str());
    lock.lock();
  }
}

void Server::Impl::infer(const HttpRequest& req, HttpResponse& res, ServedModel& m) {
  InFlight counted(in_flight);
  auto start = std::chrono::steady_clock::now();
  struct Flight {
    Impl& s;
    const HttpRequest& req;
    Flight(Impl& server, const HttpRequest& r, std::chrono::steady_clock::time_point t) : s(server), req(r) {
      std::lock_guard<std::mutex> lock(s.flights_mu);
      s.flights[&req] = t;
    }
    ~Flight() {
      std::lock_guard<std::mutex> lock(s.flights_mu);
      s.flights.erase(&req);
    }
  } flight(*this, req, start);
  serve::ModelMetrics& mm = metrics.model(m.name());
  if (!ready) {
    ++mm.failure;
    res.close = true;  // a client that keeps the connection would come back to a closing server
    return serve::set_error(res, 503, "the server is not ready (starting or shutting down)");
  }
  try {
    long long header_length = -1;
    if (const std::string* v = req.header("Inference-Header-Content-Length")) {
      // All of it a number: "162junk" is a client bug, not 162.
      auto [end, failed] = std::from_chars(v->data(), v->data() + v->size(), header_length);
      if (failed != std::errc() || end != v->data() + v->size() || header_length < 0)
        throw BadRequest("Inference-Header-Content-Length '" + *v + "' is not a non-negative whole number");
    }
    // A batch over the model's max_batch_size (or, without one, over
    // --max-request-batch) is 413, before any data is decoded.
    const int64_t max_batch = m.config().max_batch_size;
    const bool configured = max_batch > 0 && m.config().batch_buckets_up_to == 0;
    serve::InferRequest request = serve::parse_infer_request(
        req.body, header_length, max_batch > 0 ? max_batch : options.max_request_batch,
        configured ? "max_batch_size in the model's config.yaml" : "kiln serve --max-request-batch");
    // The timeout runs from the request's arrival: decoding counts too.
    auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(options.request_timeout_s));
    std::vector<Tensor> out = m.infer(request.inputs, deadline);
    std::vector<std::pair<std::string, Tensor>> named;
    std::vector<bool> binary;
    if (request.outputs.empty()) {
      for (size_t i = 0; i < out.size(); ++i) {
        named.emplace_back(m.outputs()[i].name, out[i]);
        binary.push_back(request.binary_by_default);
      }
    } else {
      for (size_t k = 0; k < request.outputs.size(); ++k) {
        size_t i = 0;
        while (i < m.outputs().size() && m.outputs()[i].name != request.outputs[k]) ++i;
        if (i == m.outputs().size()) throw BadRequest("model '" + m.name() + "' has no output '" + request.outputs[k] + "'");
        named.emplace_back(request.outputs[k], out[i]);
        binary.push_back(request.binary_outputs[k]);
      }
    }
    serve::InferResponse r = serve::make_infer_response(m.name(), m.version(), request.id, named, binary);
    if (r.header_length >= 0) {
      res.headers.emplace_back("Inference-Header-Content-Length", std::to_string(r.header_length));
      res.content_type = "application/octet-stream";
    }
    res.body = std::move(r.body);
    ++mm.success;
    mm.request_seconds.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (const serve::TooLarge& e) {
    ++mm.failure;
    serve::set_error(res, 413, e.what());
  } catch (const BadRequest& e) {
    ++mm.failure;
    serve::set_error(res, 400, e.what());
  } catch (const Unavailable& e) {
    ++mm.failure;
    serve::set_error(res, 503, e.what());
  } catch (const Error& e) {
    ++mm.failure;
    serve::set_error(res, 500, std::string("inference failed: ") + e.what());
  } catch (...) {
    ++mm.failure;
    throw;  // out of memory (503) or a library's exception (500, its text only in the log)
  }
}

Server::Server(ServeOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() {
  if (impl_->http) shutdown();
  if (impl_->access_log && impl_->access_log != stderr) std::fclose(impl_->access_log);
}

void Server::log_unanswered() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lock(s.flights_mu);
  const auto now = std::chrono::steady_clock::now();
  for (const auto& [req, since] : s.flights) {
    HttpResponse res;
    res.status = serve::kClientGone;
    s.log(*req, res, std::chrono::duration<double>(now - since).count());
  }
}

bool Server::ready() const { return impl_->ready; }

int Server::start() {
  Impl& s = *impl_;
  const ServeOptions& o = s.options;
  KILN_CHECK(o.model.empty() != o.model_repository.empty(), "serve: give either a model file or a model repository");
  // Op packages the models need: the repository's plugins/ folder, or the one
  // beside a single model file.
  const std::filesystem::path plugin_dir =
      o.model.empty() ? std::filesystem::path(o.model_repository) / "plugins"
                      : std::filesystem::path(o.model).parent_path() / "plugins";
  for (const std::string& name : load_op_library_dir(plugin_dir.string()))
    std::fprintf(stderr, "kiln serve: loaded op package %s from %s\n", name.c_str(), plugin_dir.c_str());
  if (o.access_log == "-") {
    s.access_log = stderr;
  } else if (!o.access_log.empty()) {
    s.access_log = std::fopen(o.access_log.c_str(), "a");
    KILN_CHECK(s.access_log, "serve: cannot open the access log '", o.access_log, "' for appending");
  }
  if (!o.auth_token_file.empty()) s.auth_token = read_token(o.auth_token_file);
  serve::HttpOptions h;
  h.host = o.host;
  h.port = o.port;
  h.max_body_bytes = o.max_body_bytes;
  h.max_connections = o.http_threads;
  h.max_connections_per_client = o.max_connections_per_client;
  h.header_timeout_s = o.header_timeout_s;
  // The token is checked on the head: a client without it cannot make the
  // server read (and hold) a body.
  h.check_head = [&s](HttpRequest& head, HttpResponse& res) { return s.admitted(head, res); };
  s.http = std::make_unique<serve::HttpServer>(
      h, [&s](const HttpRequest& req, HttpResponse& res) { s.handle(req, res); },
      [&s](const HttpRequest& req, const HttpResponse& res, double seconds) { s.log(req, res, seconds); });
  int port = s.http->listen();  // live before the models load
  try {
    s.repository =
        std::make_unique<serve::Repository>(o.model, o.model_repository, s.metrics, o.max_request_batch, o.device);
  } catch (...) {
    s.http->stop();
    throw;
  }
  s.loaded = true;
  if (o.repository_poll_s > 0 && !o.model_repository.empty()) s.poller = std::thread([&s] { s.poll_loop(); });
  s.ready = true;
  return port;
}

void Server::shutdown() {
  Impl& s = *impl_;
  s.ready = false;
  if (s.poller.joinable()) {
    {
      std::lock_guard<std::mutex> lock(s.poll_mu);
      s.stop_polling = true;
    }
    s.poll_cv.notify_all();
    s.poller.join();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.options.drain_timeout_s);
  while (s.in_flight > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (s.http) s.http->stop();
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
  const bool loopback = options.host == "127.0.0.1" || options.host == "::1" || options.host == "localhost";
  std::fprintf(stderr, "kiln serve: ready on %s:%d%s%s\n", options.host.c_str(), port,
               loopback ? " (this machine only; --host 0.0.0.0 to accept others)" : "",
               options.auth_token_file.empty() ? "" : ", bearer token required");
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "kiln serve: %s received; finishing in-flight requests\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  // Shutdown waits drain_timeout_s for requests, then closes their
  // connections; a computation still running then would hold the exit as
  // long as it takes. The process ends a moment after the drain timeout
  // whatever is still running: its clients are gone already.
  std::promise<void> stopped;
  auto finished = stopped.get_future();
  std::thread stopper([&] {
    server.shutdown();
    stopped.set_value();
  });
  if (finished.wait_for(std::chrono::duration<double>(options.drain_timeout_s + 1)) != std::future_status::ready) {
    server.log_unanswered();  // their clients got nothing: 499 in the access log
    std::fprintf(stderr, "kiln serve: stopped with computations still running past --drain-timeout (%g s)\n",
                 options.drain_timeout_s);
    std::fflush(nullptr);
    std::_Exit(0);
  }
  stopper.join();
  std::fprintf(stderr, "kiln serve: stopped\n");
  return 0;
}

}  // namespace kiln

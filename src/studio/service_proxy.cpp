// The service proxy: a request for a service goes to a ready instance of a
// version picked by weight, over a kept-alive connection, and is sent once
// more to another instance when the first gives no answer; each request goes
// in the service's request log.
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "kiln/studio.h"
#include "studio/service_state.h"

namespace kiln::studio {
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// A kept-alive connection from the proxy to one instance. A request goes out
// in one write, head and body together, so the instance wakes once for it.
class InstanceConnection {
 public:
  explicit InstanceConnection(int port) : port_(port) {}
  // The instance's answer, or nullopt with the reason in *why when it gave
  // none. A kept-alive connection the instance has closed meanwhile is
  // opened again once, before anything of the request was answered.
  std::optional<http::response<http::string_body>> send(http::request<http::string_body>& request, std::string* why) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool reused = socket_.is_open();
      boost::system::error_code ec;
      if (!reused) connect(ec);
      if (!ec) http::write(socket_, request, ec);
      http::response_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      if (!ec) http::read(socket_, buffer_, parser, ec);
      if (!ec) {
        if (!parser.get().keep_alive()) close();
        return parser.release();
      }
      close();
      *why = ec.message();
      if (!reused) break;  // a new connection that fails: the instance is down
    }
    return std::nullopt;
  }

 private:
  void connect(boost::system::error_code& ec) {
    socket_.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_)), ec);
    if (ec) return;
    socket_.set_option(tcp::no_delay(true), ec);
    // Blocking reads and writes, bounded: an instance that hangs fails the request.
    timeval limit{60, 0};
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
    ::setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  }
  void close() {
    boost::system::error_code ignored;
    socket_.close(ignored);
    buffer_.clear();
  }
  int port_;
  boost::asio::io_context io_;
  tcp::socket socket_{io_};
  boost::beast::flat_buffer buffer_;
};

Services::Instance::Instance() = default;
Services::Instance::~Instance() = default;

std::unique_ptr<InstanceConnection> Services::Instance::take() {
  {
    std::lock_guard<std::mutex> lock(pool_mu);
    if (!pool.empty()) {
      auto c = std::move(pool.back());
      pool.pop_back();
      return c;
    }
  }
  return std::make_unique<InstanceConnection>(port);
}

void Services::Instance::give(std::unique_ptr<InstanceConnection> c) {
  std::lock_guard<std::mutex> lock(pool_mu);
  pool.push_back(std::move(c));
}

namespace {

// A body as the request log keeps it: JSON as JSON, anything else (binary
// tensors) by its size; at most 64 KiB of it.
nlohmann::json logged_body(const std::string& body, const std::string* content_type) {
  constexpr size_t kMaxLogged = 64 << 10;
  const bool is_json = !content_type || content_type->find("json") != std::string::npos;
  if (is_json && body.size() <= kMaxLogged) {
    auto parsed = nlohmann::json::parse(body, nullptr, false);
    if (!parsed.is_discarded()) return parsed;
  }
  return {{"bytes", body.size()}, {"kept", false}};
}

}  // namespace

void Services::log_request(Service& s, const Version& v, const Instance& i, const serve::HttpRequest& req, int status,
                           double ms, const std::string* answer) {
  nlohmann::json entry = {{"time_ms", now_ms()}, {"version", v.spec.name}, {"instance", i.id},
                          {"path", req.path},     {"status", status},      {"ms", std::round(ms * 1000) / 1000}};
  thread_local std::mt19937_64 rng(std::random_device{}());
  const bool sampled = s.log_payloads > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < s.log_payloads;
  if (sampled) {
    entry["request"] = logged_body(req.body, req.header("Content-Type"));
    if (answer) entry["response"] = logged_body(*answer, nullptr);
  }
  std::lock_guard<std::mutex> lock(s.log_mu);
  s.request_log.push_back(std::move(entry));
  ++s.logged;
  while (s.request_log.size() > kRequestLogSize) s.request_log.pop_front();
}

nlohmann::json Services::requests(const std::string& name, int limit) {
  std::shared_ptr<Service> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = find(name);
  }
  std::lock_guard<std::mutex> lock(s->log_mu);
  nlohmann::json out = nlohmann::json::array();
  for (auto it = s->request_log.rbegin(); it != s->request_log.rend() && static_cast<int>(out.size()) < limit; ++it)
    out.push_back(*it);
  return {{"service", name}, {"logged", s->logged}, {"log_payloads", s->log_payloads}, {"requests", out}};
}

void Services::forward(const std::string& name, const std::string& rest, const serve::HttpRequest& req,
                       serve::HttpResponse& res) {
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Service> service;
  std::shared_ptr<Version> version;
  std::shared_ptr<Instance> instance;
  auto pick = [&](const Instance* avoid) {
    std::lock_guard<std::mutex> lock(mu_);
    auto s = find(name);
    service = s;
    std::vector<std::shared_ptr<Version>> live;
    int total = 0;
    for (auto& v : s->versions) {
      bool any = false;
      for (auto& i : v->instances) any |= i->ready && i.get() != avoid;
      if (any) live.push_back(v), total += v->spec.weight;
    }
    if (live.empty()) return false;
    thread_local std::mt19937_64 rng(std::random_device{}());
    version = live.back();
    if (total == 0) {
      version = live[rng() % live.size()];
    } else {
      int ticket = static_cast<int>(rng() % static_cast<uint64_t>(total));
      for (auto& v : live) {
        if (ticket < v->spec.weight) {
          version = v;
          break;
        }
        ticket -= v->spec.weight;
      }
    }
    instance = nullptr;
    for (auto& i : version->instances)
      if (i->ready && i.get() != avoid && (!instance || i->outstanding < instance->outstanding)) instance = i;
    ++instance->outstanding;
    return true;
  };
  if (!pick(nullptr)) {
    serve::set_error(res, 503, "service '" + name + "' has no ready instance (it is " + get(name)["state"].get<std::string>() +
                                   "; `kiln service show " + name + "` says why)");
    return;
  }
  http::request<http::string_body> out;
  out.method_string(req.method);
  out.target(rest + (req.query.empty() ? "" : "?" + req.query));
  out.version(11);
  out.set(http::field::host, "127.0.0.1");
  out.set(http::field::authorization, "Bearer " + version->secret);
  for (const char* h : {"Content-Type", "Inference-Header-Content-Length", "Accept"})
    if (const std::string* v = req.header(h)) out.set(h, *v);
  out.body() = req.body;
  out.keep_alive(true);
  out.prepare_payload();
  std::optional<http::response<http::string_body>> r;
  std::string why;
  // The instance serves the model under the service's name: a 404 for that
  // name means it has lost it (unloaded), not that the client asked amiss.
  const std::string own_model = "/v2/models/" + name;
  const bool for_own_model = rest.compare(0, own_model.size(), own_model) == 0 &&
                             (rest.size() == own_model.size() || rest[own_model.size()] == '/');
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto connection = instance->take();
    r = connection->send(out, &why);
    --instance->outstanding;
    if (r) instance->give(std::move(connection));
    const bool lost_model = r && for_own_model && r->result_int() == 404;
    if (r && !lost_model) break;
    // No answer, or no model: that instance is out of routing until its
    // probe passes (the supervisor restarts it); another one tries once.
    instance->ready = false;
    if (attempt == 1 || !pick(instance.get())) break;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  VersionStats& stats = *version->stats;
  ++stats.requests;
  stats.latency_us += static_cast<int64_t>(ms * 1000.0);
  log_request(*service, *version, *instance, req, r ? static_cast<int>(r->result_int()) : 502, ms,
              r ? &r->body() : nullptr);
  for (size_t b = 0; b < kBucketsMs.size(); ++b)
    if (ms <= kBucketsMs[b]) {
      ++stats.buckets[b];
      break;
    }
  if (!r) {
    ++stats.errors;
    serve::set_error(res, 502, "service '" + name + "': no instance answered (" + why + ")");
    return;
  }
  const int status = static_cast<int>(r->result_int());
  if (status >= 400) ++stats.errors;
  res.status = status;
  res.body = std::move(r->body());
  res.content_type = std::string((*r)[http::field::content_type]);
  auto header_length = r->find("Inference-Header-Content-Length");
  if (header_length != r->end())
    res.headers.emplace_back("Inference-Header-Content-Length", std::string(header_length->value()));
  res.headers.emplace_back("X-Kiln-Service-Version", version->spec.name);
}

}  // namespace kiln::studio

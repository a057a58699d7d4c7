#include "serve/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/http/file_body.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "kiln/error.h"
#include "serve/http_wire.h"
#include "serve/socket_stream.h"

namespace kiln::serve {
namespace http = boost::beast::http;
namespace net = boost::asio;
using error_code = boost::system::error_code;
using detail::Clock;
using detail::decode_path;
using detail::framing_problem;
using detail::has_encoded_slash;
using detail::linger_and_drain;
using detail::percent_decode;
using detail::query_of;
using detail::refuse_connection;
using detail::set_timeout;
using detail::SocketStream;

namespace {

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key.size() == name.size() && ::strncasecmp(key.data(), name.data(), name.size()) == 0) return &value;
  return nullptr;
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  size_t start = 0;
  while (start <= query.size()) {
    size_t end = query.find('&', start);
    std::string_view pair = query.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    size_t eq = pair.find('=');
    if (percent_decode(pair.substr(0, eq), true) == name)
      return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return std::nullopt;
}

void set_error(HttpResponse& res, int status, const std::string& message) {
  res.status = status;
  res.content_type = "application/json";
  res.body = nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string printable(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7f || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

std::string log_field(std::string_view text) {
  std::string out;
  for (char ch : printable(text)) out += ch == ' ' ? std::string("\\x20") : std::string(1, ch);
  return out;
}

// Connections between requests cost no thread: the reactor (one thread,
// epoll) reads each parked connection's next head as it arrives, and hands a
// connection whose head is complete (or failed, or late) to a worker, which
// reads the body, runs the handler, writes the answer and parks the
// connection again. Workers are started as needed, up to max_connections.
struct HttpServer::Impl {
  HttpOptions options;
  Handler handler;
  Logger logger;
  int listen_fd = -1;
  int epoll_fd = -1;
  std::thread acceptor, reactor;
  struct Connection {
    int fd;
    std::string remote_addr;
    boost::beast::flat_buffer buffer;
    std::optional<http::request_parser<http::string_body>> parser;  // the request being read
    Clock::time_point head_deadline;
    size_t head_bytes = 0;  // of the head being read
    error_code head_error;  // why it failed (timed_out: it came too slowly)
    bool parked = false;    // waiting in the reactor for its next head
    bool registered = false;  // its descriptor is in the epoll set
    bool refused_body = false;  // closed with a body unread: drain a little first
  };
  enum class Head { More, Done, Closed };
  std::mutex mu;
  std::condition_variable slot_freed, work_ready;
  std::list<Connection> connections;
  std::map<std::string, int> per_client;  // open connections by peer address
  std::deque<Connection*> ready;          // heads read, waiting for a worker
  std::vector<std::thread> workers;
  int idle_workers = 0;
  std::atomic<bool> stopping{false};

  void accept_loop();
  void reactor_loop();
  void worker_loop();
  // Reads what has arrived of the connection's head, without blocking.
  Head read_head(Connection& c);
  // Starts the next request's head: a fresh parser and deadline.
  void expect_head(Connection& c);
  // Hands the connection to the reactor until its next head. Locks mu.
  void park(Connection& c);
  // Closes and forgets the connection. Locks mu.
  void close_connection(Connection& c);
  // Answers the request whose head c holds; false when the connection
  // closes after it.
  bool serve_request(Connection& c);
  // Writes an answer with HttpResponse::stream: the head, the chunks its
  // function sends, the last chunk. Sets res.status to kClientGone if the
  // client left.
  void stream_answer(SocketStream& stream, HttpResponse& res);
};

HttpServer::HttpServer(HttpOptions options, Handler handler, Logger logger) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->handler = std::move(handler);
  impl_->logger = std::move(logger);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::listen() {
  Impl& s = *impl_;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(s.options.port);
  int rc = ::getaddrinfo(s.options.host.c_str(), port.c_str(), &hints, &found);
  KILN_CHECK(rc == 0, "serve: cannot resolve the address '", s.options.host, "': ", ::gai_strerror(rc));
  std::string why;
  for (addrinfo* a = found; a && s.listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      s.listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  KILN_CHECK(s.listen_fd >= 0, "serve: cannot listen on ", s.options.host, ":", s.options.port, " (", why,
             "); choose another --port or --host");
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(s.listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  int bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                     : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  // Idle connections are cheap now; descriptors are the limit: take all the process may have.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  s.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  KILN_CHECK(s.epoll_fd >= 0, "serve: epoll_create1 failed: ", std::strerror(errno));
  s.reactor = std::thread([&s] { s.reactor_loop(); });
  s.acceptor = std::thread([&s] { s.accept_loop(); });
  return bound_port;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  if (s.listen_fd >= 0) ::shutdown(s.listen_fd, SHUT_RDWR);  // accept() returns
  s.slot_freed.notify_all();
  if (s.acceptor.joinable()) s.acceptor.join();
  if (s.reactor.joinable()) s.reactor.join();
  if (s.listen_fd >= 0) ::close(s.listen_fd);
  s.listen_fd = -1;
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (auto& c : s.connections) ::shutdown(c.fd, SHUT_RDWR);  // a worker's blocked recv returns
    workers.swap(s.workers);
  }
  s.work_ready.notify_all();
  for (auto& t : workers) t.join();  // each closes the connection it held
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& c : s.connections) ::close(c.fd);  // parked or waiting for a worker
  s.connections.clear();
  s.ready.clear();
  s.per_client.clear();
  if (s.epoll_fd >= 0) ::close(s.epoll_fd);
  s.epoll_fd = -1;
}

void HttpServer::Impl::accept_loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      slot_freed.wait(lock, [&] {
        return stopping || static_cast<int>(connections.size()) < options.max_open_connections;
      });
      if (stopping) return;
    }
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping) return;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: let some close
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // a response goes out at once
    set_timeout(fd, SO_SNDTIMEO, options.write_timeout_s);
    char host[INET6_ADDRSTRLEN] = "";
    if (peer.ss_family == AF_INET)
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, host, sizeof host);
    else if (peer.ss_family == AF_INET6)
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, host, sizeof host);
    Connection* c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      if (per_client[host] >= options.max_connections_per_client) {
        refuse_connection(fd, "too many connections from " + std::string(host) + " (" +
                                  std::to_string(options.max_connections_per_client) +
                                  " at once); reuse keep-alive connections or wait for some to close");
        // Logged and counted like any answer: no request was read, so no method or path.
        HttpRequest refused;
        refused.remote_addr = host;
        HttpResponse res;
        res.status = 503;
        if (logger) logger(refused, res, 0.0);
        continue;
      }
      ++per_client[host];
      c = &connections.emplace_back();
      c->fd = fd;
      c->remote_addr = host;
      c->buffer.reserve(4096);
    }
    expect_head(*c);
    park(*c);
  }
}

void HttpServer::Impl::expect_head(Connection& c) {
  c.parser.emplace();
  c.parser->header_limit(64 * 1024);
  c.parser->body_limit(options.max_body_bytes);
  c.head_bytes = c.buffer.size();  // a pipelined head may have begun
  c.head_error = {};
  c.head_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(options.header_timeout_s));
}

HttpServer::Impl::Head HttpServer::Impl::read_head(Connection& c) {
  for (;;) {
    if (c.buffer.size() > 0) {
      error_code ec;
      const size_t used = c.parser->put(c.buffer.data(), ec);
      c.buffer.consume(used);
      if (ec && ec != http::error::need_more) {
        c.head_error = ec;  // malformed, or over the header limit: the worker says so
        return Head::Done;
      }
      if (c.parser->is_header_done()) return Head::Done;
      if (!ec && used > 0) continue;
    }
    const auto space = c.buffer.prepare(std::max<size_t>(4096, c.buffer.capacity() - c.buffer.size()));
    const ssize_t n = ::recv(c.fd, space.data(), space.size(), MSG_DONTWAIT);
    if (n > 0) {
      c.buffer.commit(static_cast<size_t>(n));
      c.head_bytes += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Head::More;
    return Head::Closed;  // the peer left (mid-head or between requests): nothing to answer
  }
}

void HttpServer::Impl::park(Connection& c) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) return;  // stop() closes it
  c.parked = true;
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  e.data.ptr = &c;
  ::epoll_ctl(epoll_fd, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &e);
  c.registered = true;
}

void HttpServer::Impl::close_connection(Connection& c) {
  if (c.refused_body) linger_and_drain(c.fd);
  std::lock_guard<std::mutex> lock(mu);
  ::close(c.fd);  // leaves the epoll set with it
  if (--per_client[c.remote_addr] == 0) per_client.erase(c.remote_addr);
  connections.remove_if([&](const Connection& other) { return &other == &c; });
  slot_freed.notify_all();
}

void HttpServer::Impl::reactor_loop() {
  std::array<epoll_event, 256> events;
  while (!stopping) {
    const int n = ::epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), 50);
    std::vector<Connection*> done, closed;
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Connection*>(events[static_cast<size_t>(i)].data.ptr);
      Head head = Head::Closed;
      try {
        head = read_head(*c);  // a parked connection is the reactor's alone
      } catch (const std::exception&) {  // no memory for its head: that connection ends
      }
      if (head == Head::More) {
        epoll_event e{};
        e.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
        e.data.ptr = c;
        ::epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &e);
      } else {
        (head == Head::Done ? done : closed).push_back(c);
      }
    }
    const auto now = Clock::now();
    std::unique_lock<std::mutex> lock(mu);
    for (Connection* c : done) c->parked = false;
    for (Connection* c : closed) c->parked = false;
    // A head that did not arrive in time: 408 if it had begun, else the idle connection just closes.
    for (auto& c : connections)
      if (c.parked && now > c.head_deadline) {
        c.parked = false;
        // Still armed in the epoll set: out of it, so that no event reaches
        // the reactor while a worker (or the close below) has it.
        ::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
        c.registered = false;
        if (c.head_bytes > 0) {
          c.head_error = net::error::timed_out;
          done.push_back(&c);
        } else {
          closed.push_back(&c);
        }
      }
    for (Connection* c : done) {
      ready.push_back(c);
      // Every waiting head gets a worker of its own while there may be more.
      if (static_cast<int>(ready.size()) > idle_workers && static_cast<int>(workers.size()) < options.max_connections)
        workers.emplace_back([this] { worker_loop(); });
      else
        work_ready.notify_one();
    }
    lock.unlock();
    for (Connection* c : closed) close_connection(*c);
  }
}

void HttpServer::Impl::worker_loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (bool first = true;; first = false) {
    if (!first || ready.empty()) {
      ++idle_workers;
      work_ready.wait(lock, [&] { return stopping || !ready.empty(); });
      --idle_workers;
    }
    if (stopping) return;
    Connection* c = ready.front();
    ready.pop_front();
    lock.unlock();
    bool open = false;
    try {
      open = serve_request(*c);
      while (open && !stopping) {
        expect_head(*c);
        const Head head = read_head(*c);  // a pipelined request is there already
        if (head == Head::Done) {
          open = serve_request(*c);
        } else {
          open = head == Head::More;
          if (open) park(*c);
          break;
        }
      }
    } catch (const std::exception& e) {  // out of memory between requests, say: this connection ends, the server goes on
      std::fprintf(stderr, "kiln serve: dropped a connection from %s: %s\n", c->remote_addr.c_str(),
                   printable(e.what()).c_str());
      open = false;
    }
    if (!open || stopping) close_connection(*c);
    lock.lock();
  }
}

void HttpServer::Impl::stream_answer(SocketStream& stream, HttpResponse& res) {
  http::response<http::empty_body> head;
  head.result(static_cast<unsigned>(res.status));
  head.set(http::field::content_type, res.content_type);
  for (const auto& [name, value] : res.headers) head.set(name, value);
  head.keep_alive(false);
  head.chunked(true);
  http::response_serializer<http::empty_body> serializer(head);
  error_code ec;
  http::write_header(stream, serializer, ec);
  auto send = [&](std::string_view piece) {
    if (ec || stopping || stream.peer_closed()) return false;
    if (piece.empty()) return true;
    net::write(stream, http::make_chunk(net::const_buffer(piece.data(), piece.size())), ec);
    return !ec;
  };
  try {
    res.stream(send);
  } catch (const std::exception& e) {  // the head is out: all that is left is to end early
    std::string detail = "kiln serve: internal error while streaming: " + printable(e.what()) + "\n";
    std::fwrite(detail.data(), 1, detail.size(), stderr);
  }
  if (!ec) net::write(stream, http::make_chunk_last(), ec);
  if (ec) res.status = kClientGone;
}

bool HttpServer::Impl::serve_request(Connection& c) {
  SocketStream stream(c.fd);
  auto& parser = *c.parser;
  const auto seconds = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  // The head came through the reactor (or failed there); the body's first
  // bytes must come within header_timeout_s, then at the minimum rate.
  error_code ec = c.head_error;
  std::string framing_error;  // a head whose body length two parties could read differently
  bool out_of_memory = false;
  if (!ec) framing_error = framing_problem(parser.get());
  if (!ec && framing_error.empty() && has_encoded_slash(view(parser.get().target())))
  framing_error = "the path has an encoded slash (%2F); write '/' as itself, and no name may contain one";
  HttpRequest req;
  HttpResponse res;
  req.remote_addr = c.remote_addr;
  // A body written to a file is gone when the request is, on every path,
  // unless the handler took the file away.
  struct RemoveBodyFile {
    const std::string& path;
    ~RemoveBodyFile() {
      if (!path.empty()) ::unlink(path.c_str());
    }
  } remove_body_file{req.body_file};
  bool keep_alive = true, head_refused = false;
  const bool head_read = !ec && !out_of_memory;
  if (head_read) {
    const auto& head = parser.get();
    req.method = std::string(view(head.method_string()));
    req.path = decode_path(view(head.target()));
    req.query = query_of(view(head.target()));
    for (const auto& field : head) req.headers.emplace_back(view(field.name_string()), view(field.value()));
  }
  if (head_read && framing_error.empty() && options.check_head) {
    try {
      head_refused = !options.check_head(req, res);
    } catch (const std::exception& e) {
      std::string detail = "kiln serve: internal error judging " + printable(req.method) + " " + printable(req.path) +
                           ": " + printable(e.what()) + "\n";
      std::fwrite(detail.data(), 1, detail.size(), stderr);
      res = HttpResponse();
      set_error(res, 500, "internal error while answering this request (the server's log has the details)");
      head_refused = true;
    }
  }
  std::optional<http::request_parser<http::file_body>> file_parser;
  error_code body_file_error;  // the file for the body could not be made
  if (head_read && framing_error.empty() && !head_refused && !parser.is_done()) {
    if (boost::beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      stream.write_some(net::buffer(kContinue, sizeof kContinue - 1), ec);
    }
    stream.set_progress_deadline(seconds(options.header_timeout_s), options.min_body_bytes_per_s);
    try {
      if (!ec && req.body_file.empty()) {
        http::read(stream, c.buffer, parser, ec);
      } else if (!ec) {  // to disk: a large upload costs the server no memory
        file_parser.emplace(std::move(parser));
        file_parser->body_limit(options.max_body_bytes);
        file_parser->get().body().open(req.body_file.c_str(), boost::beast::file_mode::write, body_file_error);
        if (!body_file_error) {
          http::read(stream, c.buffer, *file_parser, ec);
          file_parser->get().body().close();
        }
      }
    } catch (const std::bad_alloc&) {
      out_of_memory = true;  // this request's body; the server goes on
    }
  }
  auto read_at = std::chrono::steady_clock::now();
  if (head_refused) {
    keep_alive = false;
    c.refused_body = !parser.is_done();
  } else if (out_of_memory || !framing_error.empty()) {
    if (out_of_memory)
      set_error(res, 503, "the server has no memory for this request now; try again later or send a smaller one");
    else
      set_error(res, 400, framing_error);
    keep_alive = false;
    c.refused_body = true;
  } else if (body_file_error) {
    std::fprintf(stderr, "kiln serve: cannot write a request body to %s: %s\n", printable(req.body_file).c_str(),
                 body_file_error.message().c_str());
    set_error(res, body_file_error.value() == ENOSPC ? 507 : 500,
              "the server could not store the request body (" + body_file_error.message() + "); nothing was stored");
    keep_alive = false;
    c.refused_body = true;
  } else if (file_parser && ec && ec.category() == boost::system::system_category() &&
             (ec.value() == ENOSPC || ec.value() == EDQUOT || ec.value() == EFBIG)) {
    // The part written goes before the answer does: a client that retries
    // a smaller request at once finds the space free.
    ::unlink(req.body_file.c_str());
    set_error(res, 507, "cannot store the request body: the server's disk is full (" + ec.message() +
                            "); nothing was stored");
    keep_alive = false;
    c.refused_body = true;
  } else if (ec == net::error::timed_out) {
    // Started but too slow: say so (a silent idle connection is just closed).
    set_error(res, 408,
              std::string("the request did not arrive in time (") +
                  (head_read ? "its body came slower than the minimum rate" : "its head took too long") +
                  "); send whole requests at once");
    keep_alive = false;
  } else if (ec) {
    // The peer left or went silent: nothing to answer.
    if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
        ec.category() != http::make_error_code(http::error::bad_target).category())
      return false;
    if (ec == http::error::body_limit) {
      set_error(res, 413, "the request body is larger than the server accepts (" +
                              std::to_string(options.max_body_bytes) + " bytes; " + options.body_limit_hint + ")");
      c.refused_body = true;
    } else if (ec == http::error::header_limit) {
      set_error(res, 431, "the request's headers are larger than 64 KiB");
    } else {
      set_error(res, 400, "malformed HTTP request: " + ec.message());
    }
    keep_alive = false;
  } else {
    if (file_parser) {
      keep_alive = file_parser->get().keep_alive();
    } else {
      http::request<http::string_body> msg = parser.release();
      req.body = std::move(msg.body());
      keep_alive = msg.keep_alive();
    }
    try {
      handler(req, res);
    } catch (const std::bad_alloc&) {
      res = HttpResponse();
      set_error(res, 503, "the server has no memory for this request now; try again later or send a smaller one");
    } catch (const std::exception& e) {
      // A library's message is no use to the client: it goes to the log.
      std::string detail = "kiln serve: internal error on " + printable(req.method) + " " + printable(req.path) +
                           ": " + printable(e.what()) + "\n";
      std::fwrite(detail.data(), 1, detail.size(), stderr);
      res = HttpResponse();
      set_error(res, 500, "internal error while answering this request (the server's log has the details)");
    } catch (...) {
      res = HttpResponse();
      set_error(res, 500, "internal error while answering this request");
    }
  }
  if (res.takeover) {
    const auto early = c.buffer.data();
    try {
      res.takeover(c.fd, std::string_view(static_cast<const char*>(early.data()), early.size()));
    } catch (const std::exception& e) {
      std::string detail = "kiln serve: internal error in a tunnel: " + printable(e.what()) + "\n";
      std::fwrite(detail.data(), 1, detail.size(), stderr);
    }
    c.buffer.consume(c.buffer.size());
    if (logger) logger(req, res, std::chrono::duration<double>(std::chrono::steady_clock::now() - read_at).count());
    return false;
  }
  if (res.stream) {
    stream_answer(stream, res);
    if (logger) logger(req, res, std::chrono::duration<double>(std::chrono::steady_clock::now() - read_at).count());
    return false;
  }
  http::response<http::string_body> out;
  out.result(static_cast<unsigned>(res.status));
  out.set(http::field::content_type, res.content_type);
  for (const auto& [name, value] : res.headers) out.set(name, value);
  out.body() = std::move(res.body);
  out.keep_alive(keep_alive && !stopping && !res.close);
  out.prepare_payload();
  error_code written;
  http::write(stream, out, written);
  res.body = std::move(out.body());
  if (written) res.status = kClientGone;  // logged as what the client got: nothing
  if (logger) logger(req, res, std::chrono::duration<double>(std::chrono::steady_clock::now() - read_at).count());
  if (written || !out.keep_alive()) return false;
  // A large request grew the buffer: give it back rather than keep it per connection.
  if (c.buffer.capacity() > (size_t{1} << 20) && c.buffer.size() < (size_t{1} << 16)) {
    c.buffer.shrink_to_fit();
    c.buffer.reserve(4096);
  }
  return true;
}

}  // namespace kiln::serve

#pragma once
// The HTTP/1.1 transport under `kiln serve` and the studio: one thread
// (epoll) waits for every connection's next request head, a worker thread
// per request in progress reads its body, runs the handler and writes the
// answer, with one sendmsg. Requests are parsed by Boost.Beast. A request's head is judged before its body is read (a refused
// request never gets to send it), and a body may go to a file, not memory. A request
// that fits in the socket buffer is one recv, so at concurrency 1 the
// transport costs about what a loopback round trip costs (a general-purpose
// server that writes head and body separately wakes the client twice).
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::serve {

struct HttpRequest {
  std::string method;       // "GET", "POST", ...
  std::string path;         // percent-decoded, without the query
  std::string query;        // after '?', as sent (query_param decodes it)
  std::string body;
  // Where the body was written instead of `body`, when HttpOptions::check_head
  // asked for it: the handler may rename it away; what is left there after
  // the handler is removed.
  std::string body_file;
  std::string remote_addr;  // the peer's address
  std::vector<std::pair<std::string, std::string>> headers;
  // The value of a header (the name compared without case), or nullptr.
  const std::string* header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // beyond Content-Type and Content-Length
  bool close = false;  // close the connection after this answer
  // Set for an answer of unknown length (server-sent events): the head goes
  // out with chunked transfer encoding, then `stream` runs on the
  // request's worker thread with a `send` that writes one chunk and returns
  // false once the client has gone or the server is stopping (an empty
  // piece writes nothing and only asks). The connection closes after it.
  using Send = std::function<bool(std::string_view piece)>;
  std::function<void(const Send& send)> stream;
  // Set to take the connection over (a WebSocket upgrade tunnelled to
  // another server): the server writes nothing, runs `takeover` on the
  // request's worker thread with the socket (non-blocking) and whatever the
  // client sent past the request, and closes the connection after it.
  std::function<void(int fd, std::string_view early)> takeover;
};

// The value of name=value in a query string, percent-decoded ('+' is a
// space), or nullopt when the query does not have it.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

// The status logged for an answer the client did not take (it left first).
constexpr int kClientGone = 499;

// A body of {"error": message}: what every error status carries. Bytes that
// are not UTF-8 (from a client's path or name) become U+FFFD.
void set_error(HttpResponse& res, int status, const std::string& message);
// The text with control characters, backslashes and non-ASCII bytes written
// as \xHH: client input fit for a log line, which it cannot split or forge.
std::string printable(std::string_view text);
// printable, with spaces as \x20 too: one field of a space-separated log line.
std::string log_field(std::string_view text);

struct HttpOptions {
  // Runs once a request's head has arrived (body empty): false answers `res`
  // at once and closes the connection without reading the body (a token
  // checked here costs an attacker the upload). It may set head.body_file.
  std::function<bool(HttpRequest& head, HttpResponse& res)> check_head;
  std::string host = "0.0.0.0";
  int port = 0;                      // 0: any free port
  size_t max_body_bytes = 64u << 20;  // larger bodies get 413 before they are read
  // Requests served at once (a worker thread each, started as needed); more
  // wait for a worker. Connections between requests cost no thread.
  int max_connections = 512;
  int max_open_connections = 10000;  // open at once, mostly idle; more wait in the listen backlog
  int max_connections_per_client = 256;  // from one address; more are answered 503 and closed
  // A request head must arrive within this of the server starting to wait
  // for it (at accept, or after the previous answer on a keep-alive
  // connection); an idle connection is closed then too.
  double header_timeout_s = 10;
  // A body's first bytes must arrive within header_timeout_s, and from then on
  // at this rate or faster, whatever length it claims.
  double min_body_bytes_per_s = 64 * 1024;
  double write_timeout_s = 30;  // a client that stops reading its answer this long is dropped
  std::string body_limit_hint = "kiln serve --max-body-mb raises it";  // in the 413 message
};

class HttpServer {
 public:
  // The handler runs on the request's worker thread and may block; exceptions it
  // lets out become 500. The logger sees every request answered, with the
  // seconds from its last byte read to its response written.
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  using Logger = std::function<void(const HttpRequest&, const HttpResponse&, double seconds)>;

  HttpServer(HttpOptions options, Handler handler, Logger logger);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts accepting. Returns the port; throws when the
  // address cannot be bound.
  int listen();
  // Stops accepting, closes every connection (a request being handled
  // finishes first, its answer may be lost) and joins their threads.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve

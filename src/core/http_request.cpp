#include "core/http_request.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "kiln/error.h"

namespace kiln::detail {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

// "http://host:port/..." -> host and port (80 unless given).
std::pair<std::string, std::string> host_port(const std::string& server) {
  KILN_CHECK(server.rfind("https://", 0) != 0, "cannot reach ", server, ": Kiln talks plain HTTP to a studio; put a "
             "TLS-terminating proxy's inner address (http://HOST:PORT) in KILN_STUDIO_URL");
  std::string rest = server.rfind("http://", 0) == 0 ? server.substr(7) : server;
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return {rest, "80"};
  return {rest.substr(0, colon), rest.substr(colon + 1)};
}

}  // namespace

HttpAnswer http_request(const HttpRequest& r) {
  const auto [host, port] = host_port(r.server);
  try {
    boost::asio::io_context io;
    tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(r.connect_timeout);
    stream.connect(resolver.resolve(host, port));
    http::request<http::string_body> req{http::string_to_verb(r.method), r.path, 11};
    req.set(http::field::host, host);
    if (!r.bearer_token.empty()) req.set(http::field::authorization, "Bearer " + r.bearer_token);
    if (!r.content_type.empty()) req.set(http::field::content_type, r.content_type);
    req.body() = r.body;
    req.prepare_payload();
    stream.expires_after(r.timeout);
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);  // shards run to hundreds of megabytes
    http::read(stream, buffer, parser);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    HttpAnswer answer;
    answer.status = static_cast<int>(parser.get().result_int());
    answer.body = std::move(parser.get().body());
    return answer;
  } catch (const boost::system::system_error& e) {
    KILN_FAIL("cannot reach ", r.server, " for ", r.method, " ", r.path, " (", e.code().message(), ")");
  }
}

}  // namespace kiln::detail

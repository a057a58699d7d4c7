#pragma once
// How the transport reads the wire: request framing, paths and queries,
// and the few socket moves it makes outside a request (a refusal, a drain).
#include <boost/beast/http.hpp>
#include <string>
#include <string_view>

namespace kiln::serve::detail {

// Answers a connection the server will not take (503 with `message`) and
// closes it, without blocking on a client that does not read.
void refuse_connection(int fd, const std::string& message);
// Transfer-Encoding is chunked or absent, and never beside Content-Length:
// a proxy in front that read the length another way would see other
// requests in this one. Empty when the framing is sound.
std::string framing_problem(const boost::beast::http::request<boost::beast::http::string_body>& head);
// %XX sequences decoded; plus_is_space for query strings.
std::string percent_decode(std::string_view text, bool plus_is_space);
// The path of a request target, %XX sequences decoded, the query dropped.
std::string decode_path(std::string_view target);
// Routes split the decoded path at '/': an encoded one would move a name's
// text into another route ("/v2%2Frepository%2F..."), so it is refused.
bool has_encoded_slash(std::string_view target);
// What follows '?', as sent.
std::string query_of(std::string_view target);
void set_timeout(int fd, int option, double seconds);
// After refusing a request whose body is still coming, reads and drops the
// rest (up to a few seconds) so that closing does not reset the connection
// before the client has read the refusal.
void linger_and_drain(int fd);

}  // namespace kiln::serve::detail

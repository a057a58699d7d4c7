#include "serve/http_wire.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace kiln::serve::detail {
namespace http = boost::beast::http;

namespace {

std::string_view view(boost::beast::string_view s) { return {s.data(), s.size()}; }

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void refuse_connection(int fd, const std::string& message) {
  std::string body = nlohmann::json{{"error", message}}.dump();
  std::string out = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  [[maybe_unused]] ssize_t sent = ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

std::string framing_problem(const http::request<http::string_body>& head) {
  auto te = head.find(http::field::transfer_encoding);
  if (te == head.end()) return "";
  if (!boost::beast::iequals(te->value(), "chunked"))
    return "Transfer-Encoding '" + std::string(view(te->value())) + "' is not supported; send Content-Length or chunked";
  if (head.count(http::field::transfer_encoding) > 1 || head.count(http::field::content_length) > 0)
    return "a request may not carry both Transfer-Encoding and Content-Length (or Transfer-Encoding twice)";
  return "";
}

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int hi = 0, lo = 0;
    if (text[i] == '%' && i + 2 < text.size() && (hi = hex_digit(text[i + 1])) >= 0 &&
        (lo = hex_digit(text[i + 2])) >= 0) {
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += plus_is_space && text[i] == '+' ? ' ' : text[i];
    }
  }
  return out;
}

std::string decode_path(std::string_view target) { return percent_decode(target.substr(0, target.find('?')), false); }

bool has_encoded_slash(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  for (size_t at = path.find('%'); at != std::string_view::npos && at + 2 < path.size(); at = path.find('%', at + 1))
    if (path[at + 1] == '2' && (path[at + 2] == 'F' || path[at + 2] == 'f')) return true;
  return false;
}

std::string query_of(std::string_view target) {
  size_t at = target.find('?');
  return at == std::string_view::npos ? std::string() : std::string(target.substr(at + 1));
}

void set_timeout(int fd, int option, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, option, &tv, sizeof tv);
}

void linger_and_drain(int fd) {
  ::shutdown(fd, SHUT_WR);
  set_timeout(fd, SO_RCVTIMEO, 0.2);
  char sink[16384];
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < give_up && ::recv(fd, sink, sizeof sink, 0) > 0) {
  }
}

}  // namespace kiln::serve::detail

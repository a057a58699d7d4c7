#pragma once
// A keep-alive HTTP/1.1 client for the serving benchmarks, as load generators
// write them.
#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

// Each request is one prebuilt buffer sent with one send, the response read
// until its Content-Length is in. A general-purpose client adds its own tens
// of microseconds, which are not the server's.
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
  // Sends a prebuilt request; returns the response (head and body). A
  // status other than 200 aborts unless `any_status`.
  const std::string& send(const std::string& request, bool any_status = false) {
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
    if (!any_status && response_.compare(0, 12, "HTTP/1.1 200") != 0) std::abort();
    return response_;
  }

 private:
  int fd_;
  std::string response_;
};

inline double p50(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Sends a prebuilt request n times; each one's round trip in microseconds.
inline std::vector<double> time_requests(RawClient& client, const std::string& request, int n) {
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    auto start = std::chrono::steady_clock::now();
    client.send(request);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return us;
}

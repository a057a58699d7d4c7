#pragma once
// A plain TCP connection to a server on loopback, for requests no HTTP
// library sends (heads without bodies, bytes that stall).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace kiln::testing {

struct RawConnection {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  explicit RawConnection(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConnection() { ::close(fd); }
  void send(const std::string& bytes) { ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size())); }
  // Reads until `count` occurrences of `marker` have arrived (or the peer closes or stalls).
  std::string read_until(const std::string& marker, int count = 1) {
    std::string got;
    char buf[4096];
    auto occurrences = [&] {
      int n = 0;
      for (size_t at = got.find(marker); at != std::string::npos; at = got.find(marker, at + 1)) ++n;
      return n;
    };
    while (occurrences() < count) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
};

}  // namespace kiln::testing

#include "studio/tunnel.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace kiln::studio {
namespace {

// Writes all of it to a non-blocking or blocking socket; false once the peer is gone.
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n > 0) {
      data += n, size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 30000) <= 0) return false;  // a peer that stops reading for 30 s is dropped
      continue;
    }
    return false;
  }
  return true;
}

}  // namespace

void tunnel(int client_fd, std::string_view early, int port, const std::string& head, const std::atomic<bool>& stopping) {
  const int upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (upstream < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int one = 1;
  ::setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      !write_all(upstream, head.data(), head.size()) || !write_all(upstream, early.data(), early.size())) {
    static const char refused[] = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    write_all(client_fd, refused, sizeof refused - 1);
    ::close(upstream);
    return;
  }
  pollfd fds[2] = {{client_fd, POLLIN, 0}, {upstream, POLLIN, 0}};
  char buffer[64 * 1024];
  while (!stopping) {
    const int ready = ::poll(fds, 2, 500);
    if (ready < 0 && errno != EINTR) break;
    bool open = true;
    for (int side = 0; side < 2 && open; ++side) {
      if (!(fds[side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::recv(fds[side].fd, buffer, sizeof buffer, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      open = n > 0 && write_all(fds[1 - side].fd, buffer, static_cast<size_t>(n));
    }
    if (!open) break;
  }
  ::close(upstream);
}

}  // namespace kiln::studio

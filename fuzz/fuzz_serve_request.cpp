// Fuzz target: arbitrary bytes as whole HTTP requests (request line, headers,
// body; several per connection when keep-alive) sent to a real `kiln serve`
// on loopback with a model loaded. However malformed, the server must answer
// or close the connection, and go on serving: a crash, an abort or a hang
// ends the run.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kiln/serve.h"

namespace {

int server_port() {
  static std::unique_ptr<kiln::Server> server;
  static int port = [] {
    kiln::ServeOptions o;
    o.model = KILN_SOURCE_DIR "/tests/fixtures/onnx/cnn.onnx";  // dynamic batch
    o.port = 0;
    o.access_log = "";
    o.max_body_bytes = 1 << 20;
    o.request_timeout_s = 5;
    server = std::make_unique<kiln::Server>(o);
    return server->start();
  }();
  return port;
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("fuzz_serve_request: connect");
    std::abort();  // the server stopped accepting
  }
  timeval timeout{20, 0};  // far beyond any answer: a hang is a finding
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = connect_to(server_port());
  for (size_t sent = 0; sent < size;) {
    ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered early (413, 400) and closed
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);  // the request ends here
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) break;
    if (n < 0) {
      std::fprintf(stderr, "fuzz_serve_request: no answer or close within 20 s\n");
      std::abort();
    }
  }
  ::close(fd);
  return 0;
}

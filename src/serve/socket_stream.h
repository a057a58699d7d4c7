#pragma once
// A connected socket as Boost.Beast's synchronous stream, with the
// transport's deadlines: what http_server.cpp reads requests and writes
// answers through.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <chrono>

namespace kiln::serve::detail {

namespace net = boost::asio;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

inline error_code errno_code() { return error_code(errno, boost::system::system_category()); }

// A connected socket as Beast's synchronous stream. Reads give up at a
// deadline that covers a whole request head or body, not a single recv, so a
// client that sends a byte now and then cannot hold a connection for long;
// data already there is one recv. A buffer sequence goes out in one sendmsg.
class SocketStream {
 public:
  explicit SocketStream(int fd) : fd_(fd) {}
  void set_deadline(Clock::time_point t) {
    deadline_ = t;
    min_rate_ = 0;
  }
  // From now on reads give up once fewer bytes have come than `grace` and the
  // minimum rate allow: a deadline that moves with progress, not with a claim.
  void set_progress_deadline(Clock::duration grace, double min_bytes_per_s) {
    deadline_ = Clock::now() + grace;
    min_rate_ = min_bytes_per_s;
    progress_from_ = received_;
  }
  size_t received() const { return received_; }
  // Whether the peer has closed or reset its end (without reading from it).
  bool peer_closed() const {
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
  }

  template <class Buffers>
  size_t read_some(const Buffers& buffers, error_code& ec) {
    ec = {};
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers); ++it) {
      net::mutable_buffer b(*it);
      if (b.size() == 0) continue;
      for (;;) {
        ssize_t n = ::recv(fd_, b.data(), b.size(), MSG_DONTWAIT);
        if (n > 0) {
          received_ += static_cast<size_t>(n);
          return static_cast<size_t>(n);
        }
        if (n == 0) {
          ec = net::error::eof;
          return 0;
        }
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          ec = errno_code();
          return 0;
        }
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline() - Clock::now()).count();
        if (left <= 0) {
          ec = net::error::timed_out;
          return 0;
        }
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(std::min<long long>(left + 1, 1 << 30))) < 0 && errno != EINTR) {
          ec = errno_code();
          return 0;
        }
      }
    }
    return 0;
  }
  template <class Buffers>
  size_t read_some(const Buffers& buffers) {
    return or_throw([&](error_code& ec) { return read_some(buffers, ec); });
  }

  template <class Buffers>
  size_t write_some(const Buffers& buffers, error_code& ec) {
    ec = {};
    iovec iov[64];
    size_t count = 0;
    for (auto it = net::buffer_sequence_begin(buffers); it != net::buffer_sequence_end(buffers) && count < 64; ++it) {
      net::const_buffer b(*it);
      iov[count].iov_base = const_cast<void*>(b.data());
      iov[count].iov_len = b.size();
      ++count;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    for (;;) {
      ssize_t n = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      ec = errno == EAGAIN || errno == EWOULDBLOCK ? error_code(net::error::timed_out) : errno_code();
      return 0;
    }
  }
  template <class Buffers>
  size_t write_some(const Buffers& buffers) {
    return or_throw([&](error_code& ec) { return write_some(buffers, ec); });
  }

 private:
  template <class F>
  static size_t or_throw(F f) {
    error_code ec;
    size_t n = f(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

  Clock::time_point deadline() const {
    if (min_rate_ <= 0) return deadline_;
    const double earned_s = static_cast<double>(received_ - progress_from_) / min_rate_;
    return deadline_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(earned_s));
  }

  int fd_;
  Clock::time_point deadline_ = Clock::time_point::max();
  double min_rate_ = 0;
  size_t progress_from_ = 0;
  size_t received_ = 0;
};

}  // namespace kiln::serve::detail

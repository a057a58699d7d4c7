#include "distributed/tcp_store.h"

#include <sys/socket.h>

#include <cstring>

#include "kiln/error.h"

namespace kiln::dist::detail {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// Requests: op (1 byte: 'S' set, 'G' get, 'H' has), key length (4 bytes),
// key, and for 'S' the value's length and the value. Replies: 'S' one byte;
// 'G' the value's length and the value, once the key is set; 'H' one byte.
std::vector<char> frame(char op, const std::string& key, const std::vector<char>& value) {
  std::vector<char> out(1 + 4 + key.size());
  out[0] = op;
  const uint32_t n = static_cast<uint32_t>(key.size());
  std::memcpy(out.data() + 1, &n, 4);
  std::memcpy(out.data() + 5, key.data(), key.size());
  if (op == 'S') {
    const uint32_t v = static_cast<uint32_t>(value.size());
    out.resize(out.size() + 4);
    std::memcpy(out.data() + out.size() - 4, &v, 4);
    out.insert(out.end(), value.begin(), value.end());
  }
  return out;
}

uint32_t read_length(tcp::socket& s) {
  uint32_t n = 0;
  asio::read(s, asio::buffer(&n, 4));
  return n;
}

}  // namespace

StoreServer::StoreServer(int port) : acceptor_(io_) {
  tcp::endpoint at(tcp::v4(), static_cast<unsigned short>(port));
  boost::system::error_code ec;
  acceptor_.open(at.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(at, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  KILN_CHECK(!ec, "dist: rank 0 cannot host the rendezvous store on port ", port, ": ", ec.message(),
             "; choose another MASTER_PORT (a free one above 1024), or stop what holds this one");
  port_ = acceptor_.local_endpoint().port();
  accepting_ = std::thread([this] {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(io_);
      boost::system::error_code error;
      acceptor_.accept(*socket, error);
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      if (error) continue;
      sockets_.push_back(socket);
      threads_.emplace_back([this, socket] { serve(socket); });
    }
  });
}

StoreServer::~StoreServer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    boost::system::error_code ignored;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocking accept; close alone does not
    acceptor_.close(ignored);
    for (auto& s : sockets_) {
      s->shutdown(tcp::socket::shutdown_both, ignored);
      s->close(ignored);
    }
  }
  changed_.notify_all();
  accepting_.join();
  for (auto& t : threads_) t.join();
}

// One client's requests, in turn, until it goes away or the server stops.
void StoreServer::serve(std::shared_ptr<tcp::socket> socket) {
  try {
    for (;;) {
      char op = 0;
      asio::read(*socket, asio::buffer(&op, 1));
      std::string key(read_length(*socket), '\0');
      asio::read(*socket, asio::buffer(key.data(), key.size()));
      if (op == 'S') {
        std::vector<char> value(read_length(*socket));
        asio::read(*socket, asio::buffer(value.data(), value.size()));
        {
          std::lock_guard<std::mutex> lock(mutex_);
          data_[key] = std::move(value);
        }
        changed_.notify_all();
        const char ok = 1;
        asio::write(*socket, asio::buffer(&ok, 1));
      } else if (op == 'H') {
        std::lock_guard<std::mutex> lock(mutex_);
        const char present = data_.count(key) ? 1 : 0;
        asio::write(*socket, asio::buffer(&present, 1));
      } else if (op == 'G') {
        std::vector<char> value;
        {
          std::unique_lock<std::mutex> lock(mutex_);
          changed_.wait(lock, [&] { return stopping_ || data_.count(key); });
          if (stopping_) return;
          value = data_[key];
        }
        const uint32_t n = static_cast<uint32_t>(value.size());
        asio::write(*socket, asio::buffer(&n, 4));
        asio::write(*socket, asio::buffer(value.data(), value.size()));
      } else {
        return;  // not a client of this store
      }
    }
  } catch (const std::exception&) {
    // The client went away (its rank finished or died): nothing to answer.
  }
}

StoreClient::StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout), socket_(io_) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  for (;;) {
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (!ec) {
      asio::connect(socket_, endpoints, ec);
      if (!ec) {
        socket_.set_option(tcp::no_delay(true));
        return;
      }
    }
    last = ec.message();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  KILN_FAIL("dist: could not reach the rendezvous store at ", where_, " (hosted by rank 0) within ", timeout.count(),
            " ms: ", last, ". Check that rank 0 started, that MASTER_ADDR and MASTER_PORT are the same on every rank, "
            "and that no firewall blocks the port");
}

StoreClient::~StoreClient() {
  boost::system::error_code ignored;
  socket_.close(ignored);
}

std::vector<char> StoreClient::call(char op, const std::string& key, const std::vector<char>& value, bool sized_reply,
                                    std::chrono::milliseconds timeout) {
  const std::vector<char> request = frame(op, key, value);
  std::vector<char> reply;
  uint32_t length = 0;
  char flag = 0;
  boost::system::error_code failure;
  bool done = false;
  asio::async_write(socket_, asio::buffer(request), [&](boost::system::error_code ec, size_t) {
    if (ec) {
      failure = ec;
      done = true;
      return;
    }
    if (!sized_reply) {
      asio::async_read(socket_, asio::buffer(&flag, 1), [&](boost::system::error_code e, size_t) {
        failure = e;
        reply.assign(1, flag);
        done = true;
      });
      return;
    }
    asio::async_read(socket_, asio::buffer(&length, 4), [&](boost::system::error_code e, size_t) {
      if (e) {
        failure = e;
        done = true;
        return;
      }
      reply.resize(length);
      asio::async_read(socket_, asio::buffer(reply.data(), reply.size()), [&](boost::system::error_code e2, size_t) {
        failure = e2;
        done = true;
      });
    });
  });
  io_.restart();
  io_.run_for(timeout);
  if (!done) {
    boost::system::error_code ignored;
    socket_.cancel(ignored);
    io_.restart();
    io_.run();  // let the cancelled handlers finish before their captures go away
    throw Error(timeout_message(key, timeout));
  }
  KILN_CHECK(!failure, "dist: the connection to the rendezvous store at ", where_, " broke (", failure.message(),
             ") while asking for '", key, "': rank 0, which hosts it, has probably exited; check its log");
  return reply;
}

std::string StoreClient::timeout_message(const std::string& key, std::chrono::milliseconds timeout) const {
  return "dist: waited " + std::to_string(timeout.count()) + " ms for '" + key + "' in the rendezvous store at " +
         where_ + ", and no rank set it";
}

void StoreClient::set(const std::string& key, const std::vector<char>& value) { call('S', key, value, false, timeout_); }

std::vector<char> StoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  return call('G', key, {}, true, timeout);
}

bool StoreClient::has(const std::string& key) { return call('H', key, {}, false, timeout_).at(0) != 0; }

void StoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    call('G', key, {}, true, std::max(left, std::chrono::milliseconds(1)));
  }
}

std::string StoreClient::local_address() const { return socket_.local_endpoint().address().to_string(); }

}  // namespace kiln::dist::detail

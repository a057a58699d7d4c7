#pragma once
// The rendezvous store over TCP: rank 0 hosts a key-value server, every rank
// (rank 0 too) talks to it through a client. Gloo's own stores are a shared
// file system, Redis or in-process; this is the one a job needs when its
// hosts share only a network. Gets wait on the server until the key is set;
// every call on the client has a deadline.
#include <gloo/rendezvous/store.h>

#include <utility>  // before Boost.Asio, which uses std::exchange without it

#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::dist::detail {

class StoreServer {
 public:
  // Listens on every interface at `port` (0: a free one, see port()).
  explicit StoreServer(int port);
  ~StoreServer();
  int port() const { return port_; }

 private:
  void serve(std::shared_ptr<boost::asio::ip::tcp::socket> socket);
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> data_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<boost::asio::ip::tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
  std::thread accepting_;
};

class StoreClient : public gloo::rendezvous::Store {
 public:
  // Connects, trying again until `timeout` runs out (rank 0 may start after
  // the others). Throws kiln::Error naming the address when it cannot.
  StoreClient(const std::string& host, int port, std::chrono::milliseconds timeout);
  ~StoreClient() override;

  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key) override { return get(key, timeout_); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  // Whether the key is set now (no waiting).
  bool has(const std::string& key);
  // The address this process reaches the store from: the interface the
  // other ranks can reach it on.
  std::string local_address() const;

 private:
  // Sends a request and reads a one-byte reply (or a length-prefixed
  // value) within `timeout`; throws naming the key on a timeout or a lost
  // connection. After a timeout the connection is out of step: open another.
  std::vector<char> call(char op, const std::string& key, const std::vector<char>& value, bool sized_reply,
                         std::chrono::milliseconds timeout);
  std::string timeout_message(const std::string& key, std::chrono::milliseconds timeout) const;
  std::string where_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

}  // namespace kiln::dist::detail

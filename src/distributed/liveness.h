#pragma once
// Liveness: every rank beats in the rendezvous store (a counter and what it
// is doing), so that when a collective fails the ranks that are left can say
// which rank stopped answering, where it ran, and what the others were in,
// instead of repeating Gloo's "connection reset".
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kiln::dist::detail {

class Liveness {
 public:
  // `where[r]` describes rank r ("host (address)") for messages.
  Liveness(std::string host, int port, int rank, std::vector<std::string> where);
  ~Liveness();
  // What this rank is in now ("all_reduce #12 of the world"), sent with the next beat.
  void doing(const std::string& what);
  // Why `ranks` (global ranks) may have failed this rank's collective: the
  // ranks that stopped beating within `settle`, with their hosts, or what
  // the live ones were doing. Never throws.
  std::string diagnose(const std::vector<int>& ranks, std::chrono::milliseconds settle) const;
  const std::string& where(int rank) const { return where_.at(static_cast<size_t>(rank)); }

 private:
  void beat();
  std::string host_;
  int port_, rank_;
  std::vector<std::string> where_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string doing_ = "idle";
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kiln::dist::detail

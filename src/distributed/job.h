#pragma once
// What the world group and its sub-groups share: the place, the rendezvous
// store (hosted by rank 0), Gloo's TCP device and the liveness beats; and the
// thread a group's collectives run on, in the order they were called.
#include <gloo/transport/device.h>

#include <deque>
#include <functional>
#include <future>
#include <memory>

#include "distributed/liveness.h"
#include "distributed/tcp_store.h"
#include "kiln/dist.h"

namespace kiln::dist::detail {

struct Job {
  Place place;
  std::chrono::milliseconds timeout{0};
  std::string host;  // of the store
  int port = 0;
  // Destroyed in reverse: the beats stop before the store they go to.
  std::unique_ptr<StoreServer> server;  // rank 0 only
  std::unique_ptr<StoreClient> store;   // the caller's thread only (init, new_group)
  std::shared_ptr<gloo::transport::Device> device;
  std::unique_ptr<Liveness> liveness;
};

// Runs posted tasks one after another on its own thread; the destructor
// runs what is still queued, then joins. A task whose caller will wait for
// it anyway runs on the caller's thread when nothing is queued before it:
// handing it over would only add two thread wake-ups.
class CommThread {
 public:
  CommThread();
  ~CommThread();
  std::shared_future<void> post(std::function<void()> task);
  std::shared_future<void> run_or_post(std::function<void()> task);

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;  // a task is running (here or on a caller's thread)
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace kiln::dist::detail

namespace gloo::rendezvous {
class Context;
}

namespace kiln::dist {
// The world group of a job that has joined, over its connected context.
std::shared_ptr<ProcessGroup> make_world(std::shared_ptr<detail::Job> job, std::shared_ptr<gloo::rendezvous::Context> context);
}  // namespace kiln::dist

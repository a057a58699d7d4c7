// The communication thread of a process group.
#include "dist/job.h"

namespace kiln::dist::detail {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::shared_future<void> CommThread::post(std::function<void()> task) {
  auto packaged = std::make_shared<std::packaged_task<void()>>(std::move(task));
  std::shared_future<void> done = packaged->get_future().share();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.emplace_back([packaged] { (*packaged)(); });
  }
  wake_.notify_one();
  return done;
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();  // a packaged task: its exception goes to the Work
    lock.lock();
  }
}

}  // namespace kiln::dist::detail

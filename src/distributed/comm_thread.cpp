// The communication thread of a process group.
#include "distributed/job.h"

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
  wake_.notify_all();
  return done;
}

std::shared_future<void> CommThread::run_or_post(std::function<void()> task) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!queue_.empty() || busy_) {
      lock.unlock();
      return post(std::move(task));
    }
    busy_ = true;
  }
  std::packaged_task<void()> packaged(std::move(task));
  std::shared_future<void> done = packaged.get_future().share();
  packaged();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
  }
  wake_.notify_all();
  return done;
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
    if (queue_.empty()) return;
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task();  // a packaged task: its exception goes to the Work
    lock.lock();
    busy_ = false;
  }
}

}  // namespace kiln::dist::detail

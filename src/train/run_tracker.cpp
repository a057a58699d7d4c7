// RunTracker: metrics to a Kiln Studio job over HTTP (core/http_request.h), from a
// thread of its own.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/http_request.h"
#include "kiln/run_tracker.h"

namespace kiln::train {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxQueued = 100000;

struct Point {
  std::string key;
  int64_t step;
  double value;
  int64_t at_ms;
};

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}


}  // namespace

struct RunTracker::Impl {
  std::string server, token;  // server: the studio URL as given (http://HOST:PORT)
  int64_t job_id = 0, every = 10;
  bool active = false;  // this process sends (rank 0)
  std::mutex mu;       // the queue and the parameters
  std::mutex send_mu;  // one send at a time (the sender thread, or flush())
  std::condition_variable wake;
  std::deque<Point> queue;
  json params;
  bool stopping = false, warned = false;
  std::atomic<int64_t> sent{0};
  std::thread sender;

  // One POST; true on a 2xx answer.
  bool post(const std::string& path, const json& body) {
    try {
      detail::HttpRequest request;
      request.method = "POST";
      request.server = server;
      request.path = path;
      request.bearer_token = token;
      request.body = body.dump();
      request.content_type = "application/json";
      request.connect_timeout = request.timeout = std::chrono::seconds(3);
      const detail::HttpAnswer res = detail::http_request(request);
      if (res.status / 100 == 2) return true;
      warn("the studio at " + server + " answered " + std::to_string(res.status) + ": " + res.body);
    } catch (const std::exception& e) {
      warn(e.what());
    }
    return false;
  }

  void warn(const std::string& why) {
    if (warned) return;
    warned = true;
    std::fprintf(stderr, "kiln: warning: run tracking: %s; training goes on and the metrics are kept to retry\n",
                 why.c_str());
  }

  bool send_queued() {
    std::lock_guard<std::mutex> one_at_a_time(send_mu);
    std::vector<Point> batch;
    json pending_params;
    {
      std::lock_guard<std::mutex> lock(mu);
      batch.assign(queue.begin(), queue.end());
      pending_params = params;
    }
    const std::string base = "/api/v1/jobs/" + std::to_string(job_id);
    if (!pending_params.empty()) {
      if (!post(base + "/params", {{"params", pending_params}})) return false;
      std::lock_guard<std::mutex> lock(mu);
      params = json::object();
    }
    if (batch.empty()) return true;
    json points = json::array();
    for (const auto& p : batch) points.push_back({{"key", p.key}, {"step", p.step}, {"value", p.value}, {"at_ms", p.at_ms}});
    if (!post(base + "/metrics", {{"metrics", points}})) return false;
    std::lock_guard<std::mutex> lock(mu);
    // The sent points are the oldest ones still queued, unless the cap dropped some meanwhile.
    for (size_t i = 0; i < batch.size() && !queue.empty(); ++i) queue.pop_front();
    sent += static_cast<int64_t>(batch.size());
    warned = false;
    return true;
  }

  void add(const std::string& key, int64_t step, double value) {
    if (!active || !std::isfinite(value)) return;
    std::lock_guard<std::mutex> lock(mu);
    queue.push_back({key, step, value, now_ms()});
    if (queue.size() > kMaxQueued) queue.pop_front();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      wake.wait_for(lock, std::chrono::seconds(1));
      lock.unlock();
      send_queued();
      lock.lock();
    }
  }
};

RunTracker::RunTracker(std::string studio_url, std::string token, int64_t job_id, int64_t every)
    : impl_(std::make_unique<Impl>()) {
  impl_->server = studio_url;
  impl_->token = std::move(token);
  impl_->job_id = job_id;
  impl_->every = std::max<int64_t>(1, every);
  impl_->params = json::object();
}

RunTracker::~RunTracker() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->sender.joinable()) impl_->sender.join();
}

std::shared_ptr<RunTracker> RunTracker::from_environment() {
  const char* url = std::getenv("KILN_STUDIO_URL");
  const char* token = std::getenv("KILN_STUDIO_TOKEN");
  const char* job = std::getenv("KILN_JOB_ID");
  if (!url || !token || !job || !*url || !*token || !*job) return nullptr;
  try {
    return std::make_shared<RunTracker>(url, token, std::stoll(job));
  } catch (const std::exception&) {
    return nullptr;
  }
}

void RunTracker::on_train_begin(Model& m) {
  impl_->active = m.writes_files();
  if (!impl_->active) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->params["optimizer"] = m.optimizer().name();
    impl_->params["learning_rate"] = std::to_string(m.optimizer().lr());
    impl_->params["parameters"] = std::to_string(m.network().parameter_count(true));
  }
  if (!impl_->sender.joinable()) impl_->sender = std::thread([this] { impl_->run(); });
}

void RunTracker::on_step_end(Model& m, const StepInfo& s) {
  if (s.step % impl_->every == 0) impl_->add("loss", s.step, s.loss);
}

void RunTracker::on_epoch_end(Model& m, const EpochInfo& e) {
  const int64_t step = m.global_step();
  impl_->add("epoch_loss", step, e.mean_loss);
  impl_->add("val_loss", step, e.val_loss);
  impl_->add("val_accuracy", step, e.val_accuracy);
  impl_->add("samples_per_s", step, e.samples_per_s);
  impl_->add("learning_rate", step, m.optimizer().lr());
  impl_->add("epoch", step, e.epoch);
}

void RunTracker::on_train_end(Model&) {
  if (!impl_->active) return;
  // One last try, bounded by the POST's timeout: the run's end does not wait for an absent studio.
  flush();
}

void RunTracker::log(const std::string& key, int64_t step, double value) { impl_->add(key, step, value); }

bool RunTracker::flush() { return impl_->send_queued(); }

int64_t RunTracker::points_sent() const { return impl_->sent; }

}  // namespace kiln::train

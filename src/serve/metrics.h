#pragma once
// Prometheus metrics of the server: request counts, latency histograms
// (queue, compute, total), batch sizes and queue depth, per model.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Lines of the text exposition format for `name{labels}`.
  std::string text(const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct ModelMetrics {
  ModelMetrics();
  std::atomic<uint64_t> success{0}, failure{0};
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> device_bytes{0};  // what the loaded model holds on its device (ServedModel::load)
  Histogram queue_seconds, compute_seconds, request_seconds, batch_size;
};

class Metrics {
 public:
  ModelMetrics& model(const std::string& name);  // created on first use
  std::atomic<uint64_t> http_requests{0};
  // Every answer by status, those of the HTTP layer (400, 408, 413, 431) too.
  void count_response(int status);
  std::string text() const;  // the /metrics page

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> responses_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;
};

}  // namespace kiln::serve

#include "serve/metrics.h"

#include <cstdio>
#include <memory>

namespace kiln::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  char line[256];
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    if (i < bounds_.size())
      std::snprintf(line, sizeof line, "%s_bucket{%s,le=\"%g\"} %llu\n", name.c_str(), labels.c_str(), bounds_[i],
                    static_cast<unsigned long long>(cumulative));
    else
      std::snprintf(line, sizeof line, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name.c_str(), labels.c_str(),
                    static_cast<unsigned long long>(cumulative));
    s += line;
  }
  std::snprintf(line, sizeof line, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name.c_str(), labels.c_str(), sum_,
                name.c_str(), labels.c_str(), static_cast<unsigned long long>(count_));
  return s + line;
}

namespace {
std::vector<double> latency_bounds() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1, 2.5};
}
}  // namespace

ModelMetrics::ModelMetrics()
    : queue_seconds(latency_bounds()),
      compute_seconds(latency_bounds()),
      request_seconds(latency_bounds()),
      batch_size({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

ModelMetrics& Metrics::model(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& m = models_[name];
  if (!m) m = std::make_unique<ModelMetrics>();
  return *m;
}

void Metrics::count_response(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++responses_[status];
}

std::string Metrics::text() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string s;
  auto header = [&](const char* name, const char* type, const char* help) {
    s += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  header("kiln_http_requests_total", "counter", "HTTP requests received");
  s += "kiln_http_requests_total " + std::to_string(http_requests.load()) + "\n";
  header("kiln_http_responses_total", "counter", "HTTP answers by status code (499: the client left first)");
  for (const auto& [code, n] : responses_)
    s += "kiln_http_responses_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n) + "\n";
  header("kiln_inference_requests_total", "counter", "Inference requests by outcome");
  for (const auto& [name, m] : models_) {
    s += "kiln_inference_requests_total{model=\"" + name + "\",outcome=\"success\"} " + std::to_string(m->success) + "\n";
    s += "kiln_inference_requests_total{model=\"" + name + "\",outcome=\"failure\"} " + std::to_string(m->failure) + "\n";
  }
  header("kiln_inference_queue_depth", "gauge", "Requests waiting to be batched");
  for (const auto& [name, m] : models_)
    s += "kiln_inference_queue_depth{model=\"" + name + "\"} " + std::to_string(m->queue_depth) + "\n";
  header("kiln_model_memory_bytes", "gauge", "Memory a model holds on its device once loaded and warmed up");
  for (const auto& [name, m] : models_)
    s += "kiln_model_memory_bytes{model=\"" + name + "\"} " + std::to_string(m->device_bytes) + "\n";
  const std::pair<const char*, Histogram ModelMetrics::*> histograms[] = {
      {"kiln_inference_queue_seconds", &ModelMetrics::queue_seconds},
      {"kiln_inference_compute_seconds", &ModelMetrics::compute_seconds},
      {"kiln_inference_request_seconds", &ModelMetrics::request_seconds},
      {"kiln_inference_batch_size", &ModelMetrics::batch_size}};
  for (const auto& [metric, member] : histograms) {
    header(metric, "histogram", "per model");
    for (const auto& [name, m] : models_) s += ((*m).*member).text(metric, "model=\"" + name + "\"");
  }
  return s;
}

}  // namespace kiln::serve

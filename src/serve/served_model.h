#pragma once
// One model version behind the server: its session, its config, and (with
// dynamic batching) a queue that worker threads drain in batches.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/runtime.h"
#include "serve/metrics.h"
#include "serve/model_config.h"
#include "serve/oip.h"

namespace kiln::serve {

// The queue is full, or the request waited past its deadline: answered 503.
class Unavailable : public Error {
 public:
  explicit Unavailable(const std::string& msg) : Error(msg) {}
};

class ServedModel {
 public:
  ServedModel(std::string name, std::string version, const std::string& onnx_path, ModelConfig config,
              ModelMetrics& metrics);
  // Constructs and warms up a model, one load at a time in the process, and
  // measures what it then holds on its device (ModelMetrics::device_bytes):
  // over its memory_budget_mb, it does not load.
  static std::shared_ptr<ServedModel> load(std::string name, std::string version, const std::string& onnx_path,
                                           ModelConfig config, ModelMetrics& metrics);
  ~ServedModel();
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  // Runs the configured warm-up batch sizes once each.
  void warm_up();
  // Checks the inputs against the model (BadRequest naming the input, the
  // expected shape and datatype), then runs them, batched with others when
  // configured. Outputs come in the model's order. A request still waiting
  // (for a batch or a free instance) at `deadline` is withdrawn without
  // running: Unavailable.
  std::vector<Tensor> infer(const std::vector<std::pair<std::string, Tensor>>& inputs,
                            std::chrono::steady_clock::time_point deadline);

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const ModelConfig& config() const { return config_; }
  const std::vector<TensorInfo>& inputs() const { return session_.inputs(); }
  const std::vector<TensorInfo>& outputs() const { return session_.outputs(); }
  std::string expected(const TensorInfo& info) const;  // "FP32 [batch, 1, 28, 28] (batch 1 to 64)"

 private:
  struct Pending {
    std::vector<Tensor> inputs;
    int64_t batch = 1;
    std::chrono::steady_clock::time_point queued, deadline;
    std::promise<std::vector<Tensor>> result;
  };
  std::vector<Tensor> order_and_check(const std::vector<std::pair<std::string, Tensor>>& inputs) const;
  void refuse_non_finite(const std::string& input, const Tensor& t) const;
  std::vector<Tensor> run_now(const std::vector<Tensor>& inputs, std::chrono::steady_clock::time_point deadline);
  // A request of more rows than one run takes goes in runs of kMaxRowsPerRun,
  // its timeout checked between them: a huge request is bounded in time and
  // memory like the small ones (it never compiles a graph of its own size).
  static constexpr int64_t kMaxRowsPerRun = 256;
  std::vector<Tensor> run_in_chunks(const std::vector<Tensor>& inputs, std::chrono::steady_clock::time_point deadline);
  // Runs requests as one batch padded up to its bucket: their rows are
  // written straight into the graph's input buffers (one copy per request)
  // and each gets a copy of its own output rows (one more); nothing else is copied.
  // With batch_invariant, one row at a time.
  std::vector<std::vector<Tensor>> run_rows(const std::vector<const std::vector<Tensor>*>& requests);
  std::vector<std::vector<Tensor>> run_padded(const std::vector<const std::vector<Tensor>*>& requests);
  int64_t bucket(int64_t batch) const;
  std::string timed_out() const;
  void batch_loop();
  void run_batch(std::vector<std::shared_ptr<Pending>>& batch);

  std::string name_, version_;
  ModelConfig config_;
  ModelMetrics& metrics_;
  InferenceSession session_;  // on config_.device: inputs staged in pinned host memory, outputs copied back
  bool batching_ = false;
  std::mutex mu_;
  std::condition_variable ready_cv_, slot_cv_;
  std::deque<std::shared_ptr<Pending>> queue_;
  int running_ = 0;  // unbatched runs in progress (at most instance_count)
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace kiln::serve

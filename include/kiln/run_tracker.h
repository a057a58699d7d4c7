#pragma once
// Run tracking: a training callback that sends a run's parameters and
// metrics to the Kiln Studio job it runs in (docs/studio.md).
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/train.h"

namespace kiln::train {

// Sends the optimizer, learning rate and parameter count as parameters, the
// training loss every `every` steps, and each epoch's loss, validation loss
// and accuracy, throughput and learning rate. Points are queued and posted
// in batches by a thread of its own, so a step only appends to a queue; an
// unreachable studio costs a warning, never the run (the queue keeps the
// latest 100,000 points and retries). Only the process that writes files
// (rank 0) sends.
class RunTracker : public Callback {
 public:
  RunTracker(std::string studio_url, std::string token, int64_t job_id, int64_t every = 10);
  ~RunTracker() override;
  // From KILN_STUDIO_URL, KILN_STUDIO_TOKEN and KILN_JOB_ID (a studio job's
  // environment); null when they are not all set.
  static std::shared_ptr<RunTracker> from_environment();
  void on_train_begin(Model& m) override;
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;
  void on_train_end(Model& m) override;
  // Queues one value of a metric at a step (a final test accuracy, say),
  // sent with the others; nothing outside a studio job.
  void log(const std::string& key, int64_t step, double value);
  // Posts what is queued now; false when the studio did not take it.
  bool flush();
  int64_t points_sent() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::train

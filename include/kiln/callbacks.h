#pragma once
// Training callbacks beyond LossMonitor and LearningRateScheduler.
#include <cstdio>
#include <deque>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/train.h"

namespace kiln::train {

// The value a callback watches: "loss" (training), "val_loss" or "val_accuracy".
double monitored_value(const EpochInfo& e, const std::string& monitor);

// Prints the time of every epoch and the mean time per step.
class TimeMonitor : public Callback {
 public:
  void on_step_end(Model&, const StepInfo& s) override { steps_ = s.batch; }
  void on_epoch_end(Model&, const EpochInfo& e) override;

 private:
  int64_t steps_ = 0;
};

// Saves parameters and buffers (safetensors) every `every_epochs` epochs as
// DIR/PREFIX-epochN.safetensors and, with every_steps, every that many steps
// as DIR/PREFIX-stepN.safetensors, keeping the last `keep_last` files.
class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(std::string dir, int every_epochs = 1, int keep_last = 3, std::string prefix = "checkpoint",
                  int64_t every_steps = 0);
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;
  const std::deque<std::string>& kept() const { return kept_; }

 private:
  void save(Model& m, const std::string& tag, std::vector<std::pair<std::string, std::string>> metadata);
  std::string dir_, prefix_;
  int every_, keep_;
  int64_t every_steps_;
  std::deque<std::string> kept_;
};

// Stops training when the monitored value has not improved by min_delta for `patience` epochs.
class EarlyStopping : public Callback {
 public:
  EarlyStopping(std::string monitor = "val_loss", int patience = 3, double min_delta = 0.0);
  void on_epoch_end(Model& m, const EpochInfo& e) override;
  int stopped_epoch() const { return stopped_epoch_; }
  std::map<std::string, std::string> state() const override;
  void load_state(const std::map<std::string, std::string>& s) override;

 private:
  std::string monitor_;
  int patience_, wait_ = 0, stopped_epoch_ = 0;
  double min_delta_, best_;
  bool higher_is_better_;
};

// Multiplies the learning rate by `factor` when the monitored value has not
// improved for `patience` epochs, down to min_lr.
class ReduceLROnPlateau : public Callback {
 public:
  ReduceLROnPlateau(std::string monitor = "val_loss", double factor = 0.1, int patience = 2, double min_lr = 0.0);
  void on_epoch_end(Model& m, const EpochInfo& e) override;
  std::map<std::string, std::string> state() const override;
  void load_state(const std::map<std::string, std::string>& s) override;

 private:
  std::string monitor_;
  double factor_, min_lr_, best_;
  int patience_, wait_ = 0;
  bool higher_is_better_;
};

// One line per epoch: JSON objects (path ending in .jsonl) or CSV with a header.
// Opened when training begins, by the process that writes files (rank 0
// of a data-parallel job); the other ranks write nothing.
class MetricsLogger : public Callback {
 public:
  // append: continue an existing log (a resumed run) instead of starting a new one.
  explicit MetricsLogger(const std::string& path, bool append = false);
  void on_train_begin(Model& m) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;

 private:
  std::string path_;
  bool append_;
  std::ofstream out_;
  bool json_;
};

// Stops training after `max_steps` steps in all (the epoch then ends as usual).
class StopAtStep : public Callback {
 public:
  explicit StopAtStep(int64_t max_steps) : max_steps_(max_steps) {}
  void on_step_end(Model& m, const StepInfo& s) override {
    if (s.step >= max_steps_) m.stop_training();
  }

 private:
  int64_t max_steps_;
};

// Profiles `steps` training steps after `skip` warm-up steps, then writes
// DIR/profile.txt (the summary), DIR/trace.json (Chrome trace, for Perfetto)
// and DIR/report.html (a data-parallel rank K > 0: into DIR/rank-K).
class ProfilerCallback : public Callback {
 public:
  ProfilerCallback(std::string dir, int64_t steps = 20, int64_t skip = 5);
  void on_train_begin(Model& m) override;
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_train_end(Model& m) override;

 private:
  void finish();
  std::string dir_;
  int64_t steps_, skip_, first_step_ = 0;
  bool running_ = false, done_ = false;
};

// Runs the given functions at the matching events.
class LambdaCallback : public Callback {
 public:
  std::function<void(Model&, const StepInfo&)> step_end;
  std::function<void(Model&, const EpochInfo&)> epoch_end;
  void on_step_end(Model& m, const StepInfo& s) override {
    if (step_end) step_end(m, s);
  }
  void on_epoch_end(Model& m, const EpochInfo& e) override {
    if (epoch_end) epoch_end(m, e);
  }
};

}  // namespace kiln::train

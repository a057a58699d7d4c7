#pragma once
// Training checkpoints: everything needed to continue a run as if it had
// never stopped, in one safetensors file. Tensors: the model's parameters and
// buffers under their names, the optimizer's state under "optimizer/...".
// Metadata: the position (step, epoch, batches done in that epoch), the
// learning rate of every parameter group, the default generator's state (for
// dropout), and whatever the caller adds (the recipe).
#include <map>
#include <memory>
#include <vector>
#include <string>

#include "kiln/train.h"

namespace kiln::train {

struct ResumePoint {
  int64_t step = 0;
  int epoch = 1;             // from 1: the epoch in progress or just finished
  int64_t batches_done = 0;  // in that epoch
};

// `callbacks`: those whose state() goes along (as "callback<i>.<key>").
void save_training_checkpoint(const std::string& path, Model& model, const ResumePoint& at,
                              const std::map<std::string, std::string>& metadata = {},
                              const std::vector<std::shared_ptr<Callback>>& callbacks = {});
// Restores the model (strictly), the optimizer, the learning rates, the
// generator and the callbacks' state (the same callbacks in the same order),
// and calls model.resume_at(), so that the next train() continues the run.
// Returns the file's metadata.
std::map<std::string, std::string> load_training_checkpoint(const std::string& path, Model& model,
                                                            const std::vector<std::shared_ptr<Callback>>& callbacks = {});

// Writes a training checkpoint to `path` at the end of every epoch and, with
// every_steps, every that many steps (one file, replaced atomically).
class TrainingCheckpoint : public Callback {
 public:
  TrainingCheckpoint(std::string path, int64_t every_steps = 0, std::map<std::string, std::string> metadata = {},
                     std::vector<std::shared_ptr<Callback>> stateful = {})
      : path_(std::move(path)), every_steps_(every_steps), metadata_(std::move(metadata)), stateful_(std::move(stateful)) {}
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;

 private:
  std::string path_;
  int64_t every_steps_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::shared_ptr<Callback>> stateful_;
  int64_t last_batch_ = 0;
};

}  // namespace kiln::train

#pragma once
// Training checkpoints: everything needed to continue a run as if it had
// never stopped, in one safetensors file. Tensors: the model's parameters and
// buffers under their names, the optimizer's state under "optimizer/...".
// Metadata: the position (step, epoch, batches done in that epoch), the
// learning rate of every parameter group, the default generator's state (for
// dropout), and whatever the caller adds (the recipe).
#include <map>
#include <string>

#include "kiln/train.h"

namespace kiln::train {

struct ResumePoint {
  int64_t step = 0;
  int epoch = 1;             // from 1: the epoch in progress or just finished
  int64_t batches_done = 0;  // in that epoch
};

void save_training_checkpoint(const std::string& path, Model& model, const ResumePoint& at,
                              const std::map<std::string, std::string>& metadata = {});
// Restores the model (strictly), the optimizer, the learning rates and the
// generator, and calls model.resume_at(), so that the next train() continues
// the run. Returns the file's metadata.
std::map<std::string, std::string> load_training_checkpoint(const std::string& path, Model& model);

// Writes a training checkpoint to `path` at the end of every epoch and, with
// every_steps, every that many steps (one file, replaced atomically).
class TrainingCheckpoint : public Callback {
 public:
  TrainingCheckpoint(std::string path, int64_t every_steps = 0, std::map<std::string, std::string> metadata = {})
      : path_(std::move(path)), every_steps_(every_steps), metadata_(std::move(metadata)) {}
  void on_step_end(Model& m, const StepInfo& s) override;
  void on_epoch_end(Model& m, const EpochInfo& e) override;

 private:
  std::string path_;
  int64_t every_steps_;
  std::map<std::string, std::string> metadata_;
  int64_t last_batch_ = 0;
};

}  // namespace kiln::train

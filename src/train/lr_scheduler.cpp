#include "kiln/train.h"

namespace kiln::train {

void LearningRateScheduler::on_train_begin(Model& m) { m.optimizer().set_lr(schedule_(0)); }

void LearningRateScheduler::on_step_end(Model& m, const StepInfo& s) {
  if (!per_epoch_) m.optimizer().set_lr(schedule_(s.step));  // s.step steps are done: set the next one's rate
}

void LearningRateScheduler::on_epoch_end(Model& m, const EpochInfo& e) {
  if (per_epoch_) m.optimizer().set_lr(schedule_(e.epoch));
}

}  // namespace kiln::train

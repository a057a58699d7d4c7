#include "kiln/train.h"

namespace kiln::train {

void LearningRateScheduler::on_train_begin(Model& m) {
  // From where training starts: step 0 / epoch 0, or the resumed position.
  m.optimizer().set_lr(schedule_(per_epoch_ ? m.epochs_completed() : m.global_step()));
}

void LearningRateScheduler::on_step_end(Model& m, const StepInfo& s) {
  if (!per_epoch_) m.optimizer().set_lr(schedule_(s.step));  // s.step steps are done: set the next one's rate
}

void LearningRateScheduler::on_epoch_end(Model& m, const EpochInfo& e) {
  if (per_epoch_) m.optimizer().set_lr(schedule_(e.epoch));
}

}  // namespace kiln::train

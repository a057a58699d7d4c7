#include <unistd.h>

#include <cstdio>

#include "kiln/train.h"

namespace kiln::train {

void LossMonitor::on_step_end(Model&, const StepInfo& s) {
  static const bool tty = isatty(fileno(stdout)) != 0;
  if (tty) {
    constexpr int kWidth = 30;
    int filled = static_cast<int>(kWidth * s.batch / std::max<int64_t>(s.batches_per_epoch, 1));
    double remaining = s.samples_per_s > 0 ? static_cast<double>((s.batches_per_epoch - s.batch) * s.batch_size) /
                                                 s.samples_per_s
                                           : 0;
    std::printf("\repoch %d [%.*s%*s] %lld/%lld loss %.4f  %.0f samples/s  ETA %.0fs ", s.epoch, filled,
                "==============================", kWidth - filled, "", static_cast<long long>(s.batch),
                static_cast<long long>(s.batches_per_epoch), s.loss, s.samples_per_s, remaining);
    std::fflush(stdout);
  } else if (every_ > 0 && s.batch % every_ == 0) {
    std::printf("epoch %d step %lld/%lld loss %.4f (%.0f samples/s)\n", s.epoch, static_cast<long long>(s.batch),
                static_cast<long long>(s.batches_per_epoch), s.loss, s.samples_per_s);
    std::fflush(stdout);
  }
}

void LossMonitor::on_epoch_end(Model&, const EpochInfo& e) {
  static const bool tty = isatty(fileno(stdout)) != 0;
  std::printf("%sepoch %d/%d: mean loss %.4f, %.1f s, %.0f samples/s", tty ? "\r\033[K" : "", e.epoch, e.epochs,
              e.mean_loss, e.seconds, e.samples_per_s);
  if (e.skipped_steps > 0)  // float16's loss scale backed off
    std::printf(", %lld step%s skipped for overflowed gradients", static_cast<long long>(e.skipped_steps),
                e.skipped_steps == 1 ? "" : "s");
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace kiln::train

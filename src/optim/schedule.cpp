#include <cmath>

#include "kiln/error.h"
#include "kiln/optim.h"

namespace kiln::optim {

Schedule cosine_schedule(double base_lr, int64_t total, int64_t warmup, double min_lr) {
  KILN_CHECK(total > 0 && warmup >= 0 && warmup < total, "cosine schedule: need 0 <= warmup (", warmup,
             ") < total steps (", total, ")");
  return [=](int64_t step) {
    if (step < warmup) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
    double t = std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(total - warmup));
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + std::cos(M_PI * t));
  };
}

Schedule step_schedule(double base_lr, int64_t step_size, double gamma) {
  KILN_CHECK(step_size > 0, "step schedule: step_size must be positive, got ", step_size);
  return [=](int64_t step) { return base_lr * std::pow(gamma, static_cast<double>(step / step_size)); };
}

}  // namespace kiln::optim

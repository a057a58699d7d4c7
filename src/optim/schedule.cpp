#include <algorithm>
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

namespace {
void check_increasing(const std::vector<int64_t>& steps, const char* what) {
  for (size_t i = 0; i < steps.size(); ++i)
    KILN_CHECK(steps[i] >= 0 && (i == 0 || steps[i] > steps[i - 1]), what,
               " must be non-negative and strictly increasing; entry ", i, " is ", steps[i]);
}
}  // namespace

Schedule multistep_schedule(double base_lr, std::vector<int64_t> milestones, double gamma) {
  check_increasing(milestones, "multistep schedule: milestones");
  return [=](int64_t step) {
    auto passed = std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
    return base_lr * std::pow(gamma, static_cast<double>(passed));
  };
}

Schedule exponential_schedule(double base_lr, double gamma) {
  KILN_CHECK(gamma > 0, "exponential schedule: gamma must be positive, got ", gamma);
  return [=](int64_t step) { return base_lr * std::pow(gamma, static_cast<double>(step)); };
}

Schedule polynomial_schedule(double base_lr, int64_t total, double power, double end_lr) {
  KILN_CHECK(total > 0 && power > 0, "polynomial schedule: need total steps > 0 and power > 0, got ", total,
             " and ", power);
  return [=](int64_t step) {
    double t = std::min(1.0, static_cast<double>(step) / static_cast<double>(total));
    return (base_lr - end_lr) * std::pow(1.0 - t, power) + end_lr;
  };
}

Schedule piecewise_constant_schedule(std::vector<int64_t> boundaries, std::vector<double> values) {
  check_increasing(boundaries, "piecewise constant schedule: boundaries");
  KILN_CHECK(values.size() == boundaries.size() + 1, "piecewise constant schedule: needs one more value than ",
             "boundaries, got ", values.size(), " values for ", boundaries.size(), " boundaries");
  return [=](int64_t step) {
    return values[static_cast<size_t>(std::upper_bound(boundaries.begin(), boundaries.end(), step) - boundaries.begin())];
  };
}

}  // namespace kiln::optim

#include "kiln/mixed_precision.h"

#include <cmath>
#include <cstdio>

#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/grad_mode.h"

namespace kiln::train {

MixedPrecision MixedPrecision::parse(const std::string& precision) {
  MixedPrecision p;
  KILN_CHECK(parse_precision(precision, p.dtype), "precision '", precision,
             "' is not one Kiln trains in: give float32 (fp32), bfloat16 (bf16) or float16 (fp16)");
  return p;
}

std::optional<LossScale> MixedPrecision::effective_loss_scale() const {
  if (loss_scale) return loss_scale;
  if (dtype == DType::Float16) return LossScale{};
  return std::nullopt;
}

std::string MixedPrecision::str() const {
  if (!dtype) return "float32";
  std::string s = dtype_name(*dtype);
  if (auto scale = effective_loss_scale()) {
    char line[96];
    if (scale->dynamic)
      std::snprintf(line, sizeof line, " with a dynamic loss scale (from %g)", scale->initial);
    else
      std::snprintf(line, sizeof line, " with a loss scale of %g", scale->initial);
    s += line;
  }
  return s;
}

LossScaler::LossScaler(LossScale options) : options_(options), scale_(options.initial) {
  KILN_CHECK(options.initial > 0 && std::isfinite(options.initial), "the loss scale must be a positive number, got ",
             options.initial);
  KILN_CHECK(options.growth_factor >= 1 && options.backoff_factor > 0 && options.backoff_factor < 1,
             "a dynamic loss scale grows by a factor of at least 1 and backs off by one between 0 and 1, got ",
             options.growth_factor, " and ", options.backoff_factor);
  KILN_CHECK(options.growth_interval > 0, "the loss scale's growth interval must be at least 1 step, got ",
             options.growth_interval);
}

void LossScaler::update(bool finite) {
  if (!finite) {
    ++skipped_;
    good_steps_ = 0;
    // Not below the smallest normal float: a scale that small means the
    // gradients overflow whatever it is (a NaN in the data or the model).
    if (options_.dynamic) scale_ = std::max(scale_ * options_.backoff_factor, 1.17549435e-38);
    return;
  }
  if (options_.dynamic && ++good_steps_ >= options_.growth_interval) {
    good_steps_ = 0;
    // Not past float32's range: the loss times the scale must stay finite.
    scale_ = std::min(scale_ * options_.growth_factor, 1.0e38);
  }
}

std::map<std::string, std::string> LossScaler::state() const {
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.17g", scale_);
  return {{"loss_scale", scale},
          {"loss_scale_good_steps", std::to_string(good_steps_)},
          {"loss_scale_skipped", std::to_string(skipped_)}};
}

void LossScaler::load_state(const std::map<std::string, std::string>& state) {
  auto it = state.find("loss_scale");
  if (it == state.end()) return;  // saved without mixed precision: start from the initial scale
  scale_ = std::stod(it->second);
  if ((it = state.find("loss_scale_good_steps")) != state.end()) good_steps_ = std::stoll(it->second);
  if ((it = state.find("loss_scale_skipped")) != state.end()) skipped_ = std::stoll(it->second);
}

bool unscale_gradients(const std::vector<Tensor>& params, double scale) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return true;
  if (!all_finite(grads).item<bool>()) return false;
  for (Tensor& g : grads) g.mul_(1.0 / scale);
  return true;
}

}  // namespace kiln::train

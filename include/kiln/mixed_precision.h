#pragma once
// Mixed-precision training: the forward pass and the loss under autocast
// (kiln/grad_mode.h) in bfloat16 or float16, on float32 master weights, and
// for float16 a loss scale, so that small gradients do not underflow its
// narrow range: the loss is multiplied by the scale before backward, the
// gradients divided by it before the update, and a step whose gradients
// overflowed (inf or NaN) is skipped and the scale lowered.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/tensor.h"

namespace kiln::train {

struct LossScale {
  double initial = 65536.0;     // 2^16, as PyTorch's GradScaler
  double growth_factor = 2.0;   // after growth_interval updates in a row
  double backoff_factor = 0.5;  // after a step whose gradients overflowed
  int64_t growth_interval = 2000;
  bool dynamic = true;  // false: the scale stays `initial` (overflowed steps are still skipped)
};

struct MixedPrecision {
  std::optional<DType> dtype;           // bfloat16 or float16; none: float32 throughout
  std::optional<LossScale> loss_scale;  // none given: dynamic for float16, none for bfloat16
  // "float32"/"fp32", "bfloat16"/"bf16" or "float16"/"fp16"; anything else
  // is refused, naming those.
  static MixedPrecision parse(const std::string& precision);
  // The loss scale this precision trains with (given, or float16's default).
  std::optional<LossScale> effective_loss_scale() const;
  // "float32", "bfloat16", "float16 with a dynamic loss scale (from 65536)"
  std::string str() const;
};

class LossScaler {
 public:
  explicit LossScaler(LossScale options = {});
  double scale() const { return scale_; }
  // After each step: whether its gradients were all finite. An overflow
  // skips the step (counted) and multiplies the scale by the backoff factor;
  // growth_interval good steps in a row multiply it by the growth factor.
  void update(bool finite);
  int64_t skipped_steps() const { return skipped_; }
  // For training checkpoints: the scale and the run of good steps.
  std::map<std::string, std::string> state() const;
  void load_state(const std::map<std::string, std::string>& state);

 private:
  LossScale options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t skipped_ = 0;
};

// Eager training: divides the gradients of `params` by `scale` in place and
// returns true, or leaves them and returns false when any holds inf or NaN.
bool unscale_gradients(const std::vector<Tensor>& params, double scale);

}  // namespace kiln::train

#pragma once
// Batch normalization in training mode on channel-blocked activations
// (nChw8c / nChw16c), for graph mode's layout pass: the convolutions before
// and after a batch norm keep their layout, with no reorder in between. A
// position holds `block` channels side by side, so a channel's statistics
// are lane-wise vector sums, and threads split the images, not the channels
// (a layer of 16 channels is one block).
#include <cstdint>

namespace kiln::cpu {

// x: [n, c / block, hw, block].
struct BlockedBatchNorm {
  int64_t n, c, hw;
  int block;
};

struct BatchNormForward {
  const float* x;
  const float* weight;    // [c] or null (1)
  const float* bias;      // [c] or null (0)
  const float* residual;  // blocked like x or null: added before the ReLU
  float* running_mean;    // [c] or null: updated with momentum (unbiased variance)
  float* running_var;
  double momentum, eps;
  bool relu;              // y = max(y, 0), NaN passing, as the relu op
};
// y = (x - mean) / sqrt(var + eps) * weight + bias [+ residual] [ReLU], with
// the batch's mean and 1 / sqrt(var + eps) per channel written to mean and
// rstd (plain [c]). Sums are taken in double around the first value of each
// channel, as the plain kernel does.
void batch_norm_train_blocked(const BlockedBatchNorm& s, const BatchNormForward& a, float* y, float* mean, float* rstd);

struct BatchNormBackward {
  const float* gy;
  const float* mask;  // blocked like x or null: gy counts only where mask > 0 (a ReLU's backward, fused)
  const float* x;
  const float* weight;  // [c] or null
  const float* mean;    // the forward's saved statistics
  const float* rstd;
};
// gx = weight * rstd * (g - mean(g) - xhat * mean(g * xhat)), gw = sum(g * xhat),
// gb = sum(g), with g the (masked) incoming gradient.
void batch_norm_backward_blocked(const BlockedBatchNorm& s, const BatchNormBackward& a, float* gx, float* gw, float* gb);

}  // namespace kiln::cpu

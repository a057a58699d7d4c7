#pragma once
// Pooling on channel-blocked activations (nChw8c / nChw16c), for graph
// mode's layout pass: the convolutions around a pool keep their layout, with
// no reorder in between. Each spatial position holds `block` channels side by
// side, so a window's maximum is a vector maximum over its positions.
#include <cstdint>

#include "ops/pool_attrs.h"

namespace kiln::cpu {

struct PoolWindow {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  static PoolWindow of(const Pool2dAttrs& p) {
    return {p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1]};
  }
};

// x: [n, c/block, h, w, block] -> y: [n, c/block, oh, ow, block]. NaN wins, as
// in the plain kernel; padding never does. Threads take runs of channel
// blocks; with row_bands, each a band of rows across every channel block:
// where the layer before split its output that way, each thread then reads
// what it wrote, from its own cache. relu: the ReLU of the convolution
// before it, taken over (it commutes with the maximum, NaN passing alike),
// on the pooled output as it is written: a quarter of the values for a 2x2
// pool.
void max_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int block, const PoolWindow& wd, bool row_bands = false, bool relu = false);
// The gradient of max_pool_blocked: each window's gradient goes to the
// position of its maximum, found again in x (the first maximum in scan order,
// NaN first) rather than read from stored indices, so the forward pool need
// not write any.
struct MaxPoolGrad {
  const float* gy;    // [n, c, oh, ow]: plain when gy_block is 0, else blocked like x
  int gy_block;
  const float* x;     // the pool's input, blocked
  const float* mask;  // optional, blocked: the gradient passes only where mask > 0 (a ReLU's backward, fused)
  int64_t n, c, h, w, oh, ow;
  int block;
  PoolWindow window;
};
// gx: [n, c/block, h, w, block].
void max_pool_backward_blocked(const MaxPoolGrad& a, float* gx);
// One (image, channel block) plane of that gradient, plane = n * c/block + cb,
// into out [h, w, block]: for a consumer that uses it where it is made.
void max_pool_grad_plane(const MaxPoolGrad& a, int64_t plane, float* out);
// The mean over h and w per channel: [n, c/block, h, w, block] -> y: [n, c] (plain).
// x: [n, c/block, h, w, block] -> y: [n, c/block, oh, ow, block], the
// average of each window (no dilation), padding counted in it or not.
void avg_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oh, int64_t ow,
                      int block, const PoolWindow& wd, bool count_include_pad);
void global_avg_pool_blocked(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w, int block);

}  // namespace kiln::cpu

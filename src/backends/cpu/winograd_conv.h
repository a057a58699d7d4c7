#pragma once
// 3x3, stride-1 float32 convolutions on channel-blocked activations by
// Winograd's F(2x2, 3x3) or F(4x4, 3x3): each 2x2 (4x4) output tile comes
// from a 4x4 (6x6) input patch through 16 (36) products instead of 36 (144),
// so the arithmetic is 2.25x (4x) smaller. Patches are transformed a channel
// block at a time (one vector per blocked position: 16 channels with
// AVX-512, else 8), the products are GEMMs over channels, and the output
// transform adds the bias, a residual and a ReLU before the one write, or
// takes a 2x2 max pool's windows whole from its tiles and writes only those. Rounding differs from a direct
// convolution: by a few units in the last place for 2x2 tiles, about ten
// times that for 4x4 (its transforms have entries up to 8 and 1/24). Used
// for inference only.
#include <cstdint>

#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether winograd_conv handles this geometry: a 3x3 kernel, stride and
// dilation 1, one group, padding at most 1, channels in whole blocks of 8.
bool winograd_applies(const onednn::ConvShape& s, int block);
// tile: the output tile's side, 2 or 4.
// The number of floats winograd_weights writes: (tile + 2)^2 * c * o (o rounded up
// to 16 where the products run on Kiln's register tiles).
int64_t winograd_weights_size(const onednn::ConvShape& s, int tile);
// w: [o, c, 3, 3] -> u: for each of the (tile + 2)^2 patch positions, a [c, o] matrix
// (in panels of 16 columns where they are small).
void winograd_weights(const onednn::ConvShape& s, int tile, const float* w, float* u);
struct WinogradEpilogue {
  const float* bias = nullptr;  // [o] or null
  bool relu = false;
  bool residual = false;  // y holds a tensor to add before the ReLU
  // A 2x2, stride-2 max pool (no padding, floor) after it: y is
  // [n, o/block, oh/2, ow/2, block]. NaN wins, as in the pool kernels. Not with a residual.
  bool max_pool = false;
  // x * sigmoid(x) after the bias (SiLU), with AVX-512 only
  // (gemm::swish_in_epilogue); not with a max pool, which it does not commute with.
  bool swish = false;
};
// x: [n, c/block, h, w, block]; y: [n, o/block, oh, ow, block].
void winograd_conv(const onednn::ConvShape& s, int tile, int block, const float* x, const float* u, float* y,
                   const WinogradEpilogue& e);

}  // namespace kiln::cpu

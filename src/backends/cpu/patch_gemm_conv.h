#pragma once
// Float32 convolutions on blocked activations as one GEMM per image: the
// patches under the kernel (im2col, read eight channels to a vector) times
// the weights, packed once into 16-column panels. For layers with few output
// pixels and many channels (ResNet's 7x7 and 14x14 stages at batch 1) this
// keeps all FMA units busy where oneDNN's direct kernel, blocking over the
// short output rows, and Winograd, with its 16 tiny GEMMs, do not. A 1x1
// convolution reads the image as it is, from and to either block size:
// MobileNetV3's 24-, 40-, 72-, 88- and 120-channel layers sit in 8-channel
// blocks between 16-channel ones, which oneDNN has no kernel for (and its
// 8-channel 1x1 kernels ran slower than plain ones on an AVX-512 machine).
// Bias, a residual, a ReLU (capped, for ReLU6), (1x1) a hard-swish and,
// with AVX-512, a SiLU are applied as each output tile leaves the registers.
#include <cstdint>

#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether patch_gemm_conv handles this forward call: one group, no
// hard-sigmoid, no SiLU without AVX-512, and either
// - a 1x1 convolution (stride 1, no padding) from 8- or 16-channel blocks
//   to 8- or 16-channel blocks, any pixel count; or, with output channels
//   in whole 16-column panels,
// - plain input with at most 4 channels (src_block 0), into either block
//   size: a network's stem. Most tiles read their patches straight from the
//   image, the rest gather them, so any image size goes. Timed alone on
//   SqueezeNet's 3->64 stride-2 stem: about 290 us against oneDNN's direct
//   kernel's 345 (AVX2, into nChw8c); 157 against 187 (AVX-512, nChw16c); or
// - from blocked input (8 or 16) into either block size, stride 1 or 2
//   across, with output rows wide enough for tiles of at least kRows - 1
//   pixels (or from one block size to the other): an implicit GEMM on a
//   zero-padded copy of the image. On SqueezeNet's 16 -> 64 3x3 at 55x55:
//   146 us against oneDNN's 156; or
// - from blocked input into either block size where that does not apply
//   (and any call from nChw8c to nChw8c), no hard-swish, at most 256
//   output pixels per image (1024 in the batch), patches of at most 16 MB:
//   the patches are gathered, and tiles run across output rows (any stride
//   and dilation).
bool patch_gemm_applies(const onednn::LayoutCall& call);
// Whether patch_gemm_conv's threads each write a band of output rows across
// all channels (else runs of channels): plain input, and 1x1 or implicit
// GEMM convolutions with fewer than 4 pairs of panels.
bool patch_gemm_splits_rows(const onednn::LayoutCall& call);
// The number of floats patch_gemm_weights writes: o * c * kh * kw, o
// rounded up to a whole panel.
int64_t patch_gemm_weights_size(const onednn::ConvShape& s);
// w: [o, c, kh, kw] -> 16-column panels in the patches' order: (channel
// block, tap, channel) from blocked input, (channel, tap) from plain.
void patch_gemm_weights(const onednn::ConvShape& s, int src_block, const float* w, float* packed);
// x: [n, c/S, h, w, S] (or [n, c, h, w] plain), S = call.src_block;
// y: [n, o/D, oh, ow, D], D = call.dst_block. bias: [o] or null. With
// call.residual, y holds a tensor to add before the ReLU. channel_scale
// (1x1 only, patch_gemm_scales_input): x's channels are taken times
// channel_scale[i * scale_stride + c] in image i, by scaling the weights
// per image (a squeeze-and-excitation scale, without a pass over x).
void patch_gemm_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias, float* y,
                     const float* channel_scale = nullptr, int64_t scale_stride = 0);
// A 1x1 call's pixels [p0, p0 + count) of one image (x's image, blocked),
// on the calling thread only, into y: blocked [o / dst_block, y_pixels,
// dst_block] from its pixel y0 (with call.residual, y holds it). For
// kernels that make a 1x1 layer's output a few rows at a time.
void pointwise_patch_gemm_run(const onednn::LayoutCall& call, const float* image, const float* packed,
                              const float* bias, int64_t p0, int64_t count, float* y, int64_t y_pixels, int64_t y0);
// Whether patch_gemm_conv takes a channel_scale for this call, and scaling
// the weights per image (o rounded up to 16, times c) is less work than a
// pass over the image (c x h x w).
bool patch_gemm_scales_input(const onednn::LayoutCall& call);

}  // namespace kiln::cpu

#pragma once
// Float32 convolutions on nChw8c activations as one GEMM per image: the
// patches under the kernel (im2col, read eight channels to a vector) times
// the weights, packed once into 16-column panels. For layers with few output
// pixels and many channels (ResNet's 7x7 and 14x14 stages at batch 1) this
// keeps all FMA units busy where oneDNN's direct kernel, blocking over the
// short output rows, and Winograd, with its 16 tiny GEMMs, do not. Bias, a
// residual and a ReLU are applied as each output tile leaves the registers.
#include <cstdint>

#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether patch_gemm_conv handles this geometry from input in layout
// `src_block` into nChw8c output: one group, output channels in whole
// 16-column panels, and either
// - input channels in whole blocks of 8 (src_block 8), at most 256 output
//   pixels per image (1024 in the batch), patches of at most 16 MB; or
// - plain input with at most 4 channels (src_block 0): a network's stem.
//   Most tiles read their patches straight from the image, the rest gather
//   them, so any image size goes. Timed alone on SqueezeNet's 3->64 stride-2
//   stem: about 290 us against oneDNN's direct kernel's 345.
bool patch_gemm_applies(const onednn::ConvShape& s, int src_block);
// The number of floats patch_gemm_weights writes: o * c * kh * kw.
int64_t patch_gemm_weights_size(const onednn::ConvShape& s);
// w: [o, c, kh, kw] -> 16-column panels in the patches' order: (channel
// block, tap, channel) from blocked input, (channel, tap) from plain.
void patch_gemm_weights(const onednn::ConvShape& s, int src_block, const float* w, float* packed);
// x: [n, c/8, h, w, 8] (or [n, c, h, w] plain); y: [n, o/8, oh, ow, 8].
// bias: [o] or null. residual: y holds a tensor to add before the ReLU.
void patch_gemm_conv(const onednn::ConvShape& s, int src_block, const float* x, const float* packed, const float* bias,
                     float* y, bool relu, bool residual);

}  // namespace kiln::cpu

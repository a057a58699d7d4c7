#pragma once
// The weight gradient of a convolution whose input has few channels (a first
// layer: 1-4 image channels), from a channel-blocked output gradient. oneDNN
// pads such an input to a whole channel block and does 8x the work in its
// blocked kernel, or runs a GEMM with a K of 9 in its plain one; both take
// ten times longer than this loop, which reads the gradient once.
#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether conv_weight_grad_few_channels handles this geometry.
bool few_channel_weight_grad_applies(const onednn::ConvShape& s, int block);
// x: [n, c, h, w] plain; gy: [n, o/block, oh, ow, block]; gw: [o, c, kh, kw];
// gb: [o] (the sum of gy over n, oh, ow) or null.
void conv_weight_grad_few_channels(const onednn::ConvShape& s, int block, const float* x, const float* gy, float* gw,
                                   float* gb);
// The same with gy the gradient of a blocked max pool (with its fused ReLU
// mask) that follows the convolution: each image's gradient plane is made
// where it is used, so the full-size gradient is never written.
void conv_weight_grad_few_channels(const onednn::ConvShape& s, const float* x, const MaxPoolGrad& pool, float* gw,
                                   float* gb);

}  // namespace kiln::cpu

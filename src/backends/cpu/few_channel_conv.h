#pragma once
// Kernels for first layers (1-4 image channels) whose outputs are channel
// blocked. oneDNN pads such an input to a whole channel block and does 8x the
// work in its blocked kernels, or runs a GEMM with a K of 9 in its plain one.
// The weight gradient here reads the output gradient once, about ten times
// faster; the inference kernel writes only the pooled output.
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

// Inference: y = max_pool_2x2(relu(conv(x, w) + bias)) in one pass, x plain
// [n, c, h, w] with few channels, y blocked [n, o/block, oh/2, ow/2, block].
// The convolution's output, a CNN's largest activation, is never written.
// Patches of at most 27 values (3x3 over 3 channels): its sums, a tap at a
// time, fall behind oneDNN's kernel and a separate pool on larger ones
// (a 7x7 stem over 3 channels at 224x224: 1.2-1.4 ms against 1.0; a 3x3
// over one channel at batch 64: 0.42 against 0.96).
bool conv_relu_pool_applies(const onednn::ConvShape& s, int block, const PoolWindow& window);
void conv_relu_pool_few_channels(const onednn::ConvShape& s, int block, const float* x, const float* w,
                                 const float* bias, float* y);

}  // namespace kiln::cpu

#pragma once
// Depthwise convolutions on channel-blocked activations (nChw8c / nChw16c),
// for graph mode's layout pass: each of a block's channels sits in one lane,
// so a window is a run of vector multiply-adds over its positions.
//
// Threads take bands of output rows across every channel block, as the
// patch GEMM's 1x1 layers around them split their pixels: each thread then
// reads what it wrote, from its own cache. oneDNN's kernel splits by channel
// blocks, so in a MobileNet block half of every layer's input came from the
// other core: a 24 -> 72 1x1 layer took 66 us after it against 47 alone.
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether blocked_depthwise_conv runs call: forward, groups == c == o,
// the same block (8 or 16) in and out, an epilogue of bias, ReLU, a cap and
// hard-swish at most (no residual).
bool blocked_depthwise_applies(const onednn::LayoutCall& call);

// The weights as the kernel reads them: [c / block, kh * kw, block], from
// plain [c, 1, kh, kw].
int64_t blocked_depthwise_weights_size(const onednn::LayoutCall& call);
void blocked_depthwise_weights(const onednn::LayoutCall& call, const float* w, float* packed);

// Whether its threads take bands of rows across every channel block (on
// narrow images, under 32 columns with AVX-512, 16 without, they take whole
// channel blocks instead).
bool blocked_depthwise_splits_rows(const onednn::LayoutCall& call);

// x [n, c / block, h, w, block] -> y [n, c / block, oh, ow, block].
void blocked_depthwise_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                            float* y);

// A 1x1 convolution (a patch GEMM from blocked input, no residual) whose
// output only this depthwise one reads, as in a MobileNet block's expansion:
// each thread makes the rows of the 1x1 layer's output its band of
// depthwise rows reads, as it reaches them, into a ring of a window's
// height, instead of the whole (MobileNetV2's 16 -> 96 at 112x112 wrote
// 4.8 MB that the depthwise layer then read back from the caches below).
bool pointwise_depthwise_applies(const onednn::LayoutCall& expand, const onednn::LayoutCall& call);
// x [n, c_in / S, h, w, S] -> y [n, c / B, oh, ow, B]; panels, expand_bias:
// the 1x1's (patch_gemm_weights); packed, bias: the depthwise layer's.
void pointwise_depthwise_conv(const onednn::LayoutCall& expand, const onednn::LayoutCall& call, const float* x,
                              const float* panels, const float* expand_bias, const float* packed, const float* bias,
                              float* y);

}  // namespace kiln::cpu

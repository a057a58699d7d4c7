#pragma once
// Depthwise convolutions on channel-blocked activations (nChw8c / nChw16c),
// for graph mode's layout pass: each of a block's channels sits in one lane,
// so a window is a run of vector multiply-adds over its positions. Grouped
// convolutions of up to a block's channels a group too (ResNeXt's 4 and 8,
// RegNetY's 8, RegNetX's 16): each input channel of a group in turn, moved
// to the lanes that read it by a constant permutation of the block's lanes
// (a broadcast where a block is one group).
//
// Threads take bands of output rows across every channel block, as the
// patch GEMM's 1x1 layers around them split their pixels: each thread then
// reads what it wrote, from its own cache. oneDNN's kernel splits by channel
// blocks, so in a MobileNet block half of every layer's input came from the
// other core: a 24 -> 72 1x1 layer took 66 us after it against 47 alone.
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

// Whether blocked_depthwise_conv runs call: forward, o == c in groups of
// 1 (depthwise), 2, 4, ... up to the block, the same block (8 or 16) in and
// out, an epilogue of bias, ReLU, a cap, hard-swish or (16-channel blocks,
// AVX-512) SiLU at most (no residual).
bool blocked_depthwise_applies(const onednn::LayoutCall& call);

// The weights as the kernel reads them: [c / block, c / groups, kh * kw,
// block], from plain [c, c / groups, kh, kw].
int64_t blocked_depthwise_weights_size(const onednn::LayoutCall& call);
void blocked_depthwise_weights(const onednn::LayoutCall& call, const float* w, float* packed);

// Whether its threads take bands of rows across every channel block (on
// narrow images, under 32 columns with AVX-512, 16 without, they take whole
// channel blocks instead).
bool blocked_depthwise_splits_rows(const onednn::LayoutCall& call);

// x [n, c / block, h, w, block] -> y [n, c / block, oh, ow, block].
void blocked_depthwise_conv(const onednn::LayoutCall& call, const float* x, const float* packed, const float* bias,
                            float* y);

// A depthwise layer with the 1x1 layers next to it made inside it, as in a
// MobileNet block: an expansion (a patch GEMM from blocked input, no
// residual) whose output only it reads, and a projection (the same, a
// residual allowed: y then holds it) that alone reads its output. Threads
// take bands of output rows; each makes the expansion's rows its windows
// read, as they reach them, into a ring of a window's height, and projects
// each output row as it is made, so neither the expansion's output
// (MobileNetV2's 16 -> 96 at 112x112: 4.8 MB) nor the depthwise layer's is
// ever written whole. Rows of 32 columns and more (16 without AVX-512).
struct DepthwiseChain {
  onednn::LayoutCall call;                                       // the depthwise layer
  const float *taps, *bias;                                      // blocked_depthwise_weights, [c] or null
  const onednn::LayoutCall* expand = nullptr;                    // or null
  const float *expand_panels = nullptr, *expand_bias = nullptr;  // patch_gemm_weights, [c] or null
  const onednn::LayoutCall* project = nullptr;                   // or null
  const float *project_panels = nullptr, *project_bias = nullptr;
};
bool pointwise_depthwise_applies(const onednn::LayoutCall& expand, const onednn::LayoutCall& call);
bool depthwise_pointwise_applies(const onednn::LayoutCall& call, const onednn::LayoutCall& project);
// x: the chain's input (blocked, the expansion's or the depthwise layer's);
// y: its output (the projection's, or the depthwise layer's).
void depthwise_chain_conv(const DepthwiseChain& chain, const float* x, float* y);

}  // namespace kiln::cpu

#pragma once
// Which kernel runs an inference convolution on blocked activations with
// constant weights: oneDNN's direct kernel, Winograd's F(2x2, 3x3) or
// F(4x4, 3x3), the patch GEMM, or Kiln's depthwise kernel. Chosen by timing all that apply, once per geometry, on the
// real sizes: which wins depends on the layer's width, its output size and
// the batch, and on this CPU.
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

enum class ConvAlgorithm { Direct, Winograd2x2, Winograd4x4, PatchGemm, Depthwise };

// For a forward call. KILN_CONV_ALGORITHM (direct, winograd2x2, winograd4x4,
// patch_gemm or depthwise) pins the choice wherever that algorithm applies: results
// then round alike from one compile to the next (timing on a busy machine
// can choose differently), and tests reach each kernel. Otherwise each is
// timed between a write of its input and a read of its output by threads
// taking bands of rows, as its neighbours in a network mostly split their
// work, and the others must beat the direct kernel by 3% (the depthwise
// kernel on a wide image need only match it: it keeps that split too);
// large weights are timed coming from memory, and smaller ones, timed warm,
// count the time it would take to read their extra bytes (16/9 the size for
// F(2x2), 4x for F(4x4)). A call from one block size to the
// other, which oneDNN has no fast kernel for, takes the patch GEMM untimed.
// pooled: a 2x2, stride-2 max pool (floor) follows, and call.relu is the
// ReLU before it; Winograd would run it inside (WinogradEpilogue::max_pool).
// neighbours: the depthwise chains (blocked_depthwise.h) this call could
// be part of; where Kiln's depthwise kernel can make a 1x1 neighbour inside
// it and depthwise_join_pays, the patch GEMM and that kernel are taken
// without timing either alone, as the saving is in the writes between the
// layers, which timing either call alone does not see.
struct ConvNeighbours {
  const onednn::LayoutCall* pointwise_before = nullptr;  // a 1x1 layer whose output only this one reads
  const onednn::LayoutCall* depthwise_after = nullptr;   // the depthwise layer that alone reads this one's output
  const onednn::LayoutCall* depthwise_before =
      nullptr;  // a depthwise layer on Kiln's kernel whose output only this reads
};
ConvAlgorithm fastest_conv_algorithm(const onednn::LayoutCall& call, bool pooled = false,
                                     const ConvNeighbours& neighbours = {});
// Whether a 1x1 layer made inside the depthwise layer `call` (its
// expansion before, or its projection after: the other null) runs faster
// than the two layers one after the other, timed once per geometry; the
// join is kept unless apart is 3% faster. It saves the writes of the
// layer between, which pays where they would leave the core's L2 (AMD
// Zen 4 and 5, 1 MB: MobileNetV2 0.92x) and can cost where they stay in it
// (Intel Sapphire Rapids, 2 MB: MnasNet 1.04x on one thread). Where
// KILN_CONV_ALGORITHM pins an algorithm, every join is made, untimed.
bool depthwise_join_pays(const onednn::LayoutCall& call, const onednn::LayoutCall* expand,
                         const onednn::LayoutCall* project);
// Whether fastest_conv_algorithm times candidates for this call (more than
// one applies); otherwise its answer follows from the call alone.
bool conv_algorithm_is_timed(const onednn::LayoutCall& call);

// The weights Kiln's own algorithms read (Winograd's transform, the patch
// GEMM's panels, the depthwise kernel's taps), made from the plain
// [o, c / groups, kh, kw] ones: their size in floats, and the making.
int64_t own_weights_size(ConvAlgorithm algorithm, const onednn::LayoutCall& call);
void own_weights(ConvAlgorithm algorithm, const onednn::LayoutCall& call, const float* w, float* out);

// Whether oneDNN's kernel for this blocked forward call runs faster than on
// plain layouts, timed once per geometry: on a machine whose block is 16,
// 8-channel blocks make depthwise layers many times faster but some wide 1x1
// layers slower (SqueezeNet's 1000-class head: 1.2 ms against 0.8).
bool blocked_beats_plain(const onednn::LayoutCall& call);

}  // namespace kiln::cpu

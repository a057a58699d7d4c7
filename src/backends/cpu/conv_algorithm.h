#pragma once
// Which kernel runs an inference convolution on blocked activations with
// constant weights: oneDNN's direct kernel, Winograd's F(2x2, 3x3) or
// F(4x4, 3x3), or the patch GEMM. Chosen by timing all that apply, once per geometry, on the
// real sizes: which wins depends on the layer's width, its output size and
// the batch, and on this CPU.
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu {

enum class ConvAlgorithm { Direct, Winograd2x2, Winograd4x4, PatchGemm };

// For a forward call with the same layout in and out. The patch GEMM must
// beat the others by 5% (it needs scratch), Winograd by 12% (scratch, and
// weights 16/9 the size) and F(4x4) by 20% (weights 4x the size, and more
// rounding).
ConvAlgorithm fastest_conv_algorithm(const onednn::LayoutCall& call);

}  // namespace kiln::cpu

#pragma once
// 3x3 depthwise convolutions on plain NCHW planes, sixteen output columns
// per vector: the row-at-a-time loops of plain_conv.cpp spend most of their
// time at the edges of the small planes (14x14, 28x28) where ShuffleNet's
// channel counts (58, 116, 232) keep the activations plain.
#include "backends/cpu/plain_conv.h"

namespace kiln::cpu {

// Whether depthwise_3x3_plane takes g (3x3, stride 1 or 2, no dilation; a CPU with AVX-512).
bool depthwise_3x3_vector_applies(const PlainConv& g);
// One plane: src [h, w] with its 3x3 kernel k and bias b into dst [oh, ow], ReLU'd when relu (NaN passes).
void depthwise_3x3_plane(const PlainConv& g, const float* src, const float* k, float b, bool relu, float* dst);

}  // namespace kiln::cpu

#pragma once
// The forward interpolate over planes whose pixels are `pixel` consecutive
// values: 1 for NCHW (a plane per channel), the channel block for nChw8c (a
// plane per block of channels), which graph mode's layout pass runs on
// blocked activations with no reorder around it.
#include <cstdint>

#include "kiln/attrs.h"

namespace kiln::cpu {

// src: [planes, h, w, pixel] -> dst: [planes, oh, ow, pixel], with the
// interpolate op's attributes (oh, ow from "size"). False, writing nothing,
// when they map an output position outside the input (tf_crop_and_resize),
// which takes the extrapolation value instead.
template <typename T>
bool interpolate_pixels(const T* src, T* dst, int64_t planes, int64_t h, int64_t w, int64_t pixel, const Attrs& a);

}  // namespace kiln::cpu

#pragma once
// Max pooling on plain NCHW float32 (or 8-bit quantized values) when nothing reads the argmax indices
// (inference graphs, and pools whose channels do not fit a blocked layout):
// the maximum of each window's rows first, a vector max over whole rows,
// then of its columns. NaN wins and padding never does, as in the plain
// kernel.
#include <cstdint>

#include "backends/cpu/blocked_pool.h"

namespace kiln::cpu {

// x: [planes, h, w] -> y: [planes, oh, ow]; T is float, uint8_t or int8_t.
template <typename T>
void max_pool_values(const T* x, T* y, int64_t planes, int64_t h, int64_t w, int64_t oh, int64_t ow,
                     const PoolWindow& wd);

// The same on channels-last data: x [n, h, w, c] -> y [n, oh, ow, c] (8-bit types, as int8 layers keep them).
template <typename T>
void max_pool_values_nhwc(const T* x, T* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                          const PoolWindow& wd);

}  // namespace kiln::cpu

#pragma once
// Kiln's own depthwise int8 convolution for CPUs with AVX-512 VNNI, over
// channels-last 8-bit activations (int8 read as uint8 plus 128, as
// int8_gemm reads them): for each output row and block of 16
// channels, every input column's kh rows interleaved once into 4-byte
// groups (byte i of channel c: row i), so that each kernel column is one
// vpdpbusd of those groups against the column's weights; requantized as
// int8_gemm's tiles are. oneDNN's int8 depthwise kernel took about 13
// cycles per 16 outputs of a 3x3 layer (MobileNetV2's depthwise layers were
// a third of its int8 time at batch 1).
#include <cstdint>

namespace kiln::cpu::int8_depthwise {

struct Geometry {
  int64_t n, c, h, w;  // input [n, h, w, c] in memory; c channels, one per group
  int64_t kh, kw, oh, ow, sh, sw, ph, pw;
};

// Whether the kernel takes it: a build with VNNI, channels a multiple of
// 16, at most 4 kernel rows (one 4-byte group), padding that keeps every
// window's rows and columns within the padded image.
bool takes(const Geometry& g);

// Weights [c, 1, kh, kw] packed: per block of 16 channels, kw registers of
// 4-byte groups, then each channel's sum of weights (for x's zero point).
int64_t packed_bytes(const Geometry& g);
void pack(const Geometry& g, const int8_t* w, void* out);

struct Requantization {
  const float* scales = nullptr;  // x_scale * w_scale / y_scale, per channel or one
  bool per_channel = false;
  const int32_t* bias = nullptr;  // int32 [c] in the accumulator's scale, or null
  bool x_signed = false;          // int8 rather than uint8 x
  int32_t x_zero = 0, y_zero = 0;
  bool y_signed = false;
};

// y [n, oh, ow, c] in memory (uint8, or int8 where y_signed) from x [n, h, w, c].
void run(const Geometry& g, const Requantization& q, const void* x, const void* packed, void* y);

}  // namespace kiln::cpu::int8_depthwise

#pragma once
// Kiln's own int8 matrix product for CPUs with AVX-512 VNNI: 8-bit rows of
// A (uint8, or int8 read as uint8 plus 128) times signed 8-bit B packed once
// into panels of 32 columns, the sums in int32 registers (vpdpbusd: four
// byte products a lane an instruction), and the requantization, or the
// dequantization chain of QuantizedMatmulCall::Dequantized, in the tile's
// epilogue. It serves the int8 layout pass's matrix products and its 1x1
// stride-1 convolutions over channels-last activations (a matrix product of
// pixels by channels), stems as an implicit GEMM (int8_patch_conv.h), and products of two activations, packing B per
// call (run_with_computed_b), where oneDNN's brgemm kernels ran BERT's 128x256x1024 feed-forward product at about half
// the instruction's peak and MobileNetV2's 16-deep 1x1 layers at a fifth.
#include <cstdint>

#include "backends/cpu/onednn_int8.h"

namespace kiln::cpu::int8_gemm {

// Whether this build has the kernels (compiled for AVX-512 VNNI), and
// whether they take a product of depth k (whole groups of 4: each row is
// read 4 bytes at a time).
bool available();
inline bool takes_depth(int64_t k) { return k > 0 && k % 4 == 0; }

// The bytes of a packed [k, n] B: its panels, then each column's sum (the
// correction for A's zero point), int32.
int64_t packed_bytes(int64_t k, int64_t n);
// B(i, j) is b[i * row_stride + j * col_stride]: (n, 1) for a matmul's
// row-major [k, n], (1, k) for a 1x1 convolution's [o, c] weights.
void pack(const int8_t* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, void* out);

struct Call {
  int64_t m = 0, k = 0, n = 0;
  int64_t lda = 0, ldy = 0;       // row strides of A and of y (and of the residual), in elements
  const float* scales = nullptr;  // a_scale * b_scale / y_scale, per column or one
  bool per_column = false;
  const int32_t* bias = nullptr;                         // int32 [n] in the accumulator's scale, or null
  // int32 [m] added to each row's sums, or null: the correction for a B
  // with a zero point (b_zero * the sum of the row's a - a_zero, negated).
  const int32_t* row_bias = nullptr;
  bool b_centered = false;  // B's values minus its zero point may reach 255 (for the int32 range check)
  bool a_signed = false;                                 // int8 rather than uint8 A
  int32_t a_zero = 0, y_zero = 0;                        // y_zero: of the 8-bit result, dequantized or not
  bool y_signed = false;                                 // an int8 rather than uint8 result
  onednn::QuantizedMatmulCall::Dequantized dequantized;  // its y_zero is y_zero here
  const float* vector = nullptr;                         // dequantized.add_vector's [n], or to_float's bias
  // A float32 y: the sums times the scales, plus `vector` where given, not
  // rounded (a dynamically quantized product); `dequantized` is then unused.
  bool to_float = false;
  const float* residual = nullptr;                       // dequantized.add_residual's [m, n], row stride ldy
  // A's rows as patches of images (a convolution as an implicit GEMM;
  // int8_patch_conv.h), uint8 only: a row's depth is `segments` runs of
  // k / segments bytes (whole groups of 4), run s at s * segment_stride
  // from the row's start; and the rows come in blocks of block_rows (an
  // output row of pixels), row i of a block at i * lda, no tile crossing
  // blocks, and blocks in images of image_blocks: block b of image j
  // starts at j * image_stride + b * block_stride. The defaults: one run,
  // one block of m rows.
  int64_t segments = 1, segment_stride = 0;
  int64_t block_rows = 0, block_stride = 0, image_blocks = 0, image_stride = 0;
};

// y = the product of A [m, k] (row stride lda; uint8, or int8 where
// a_signed) and the packed B, through the epilogue.
void run(const Call& c, const void* a, const void* packed, void* y);

// The same where B is computed too (attention's products): B a row-major
// [k, n] of uint8 or int8 (b_signed) bytes with zero point b_zero, packed
// here, and each row's sums corrected for that zero point. c.bias and
// c.row_bias must be null; c.lda == c.k.
void run_with_computed_b(const Call& c, const void* a, const void* b, bool b_signed, int32_t b_zero, void* y);

}  // namespace kiln::cpu::int8_gemm

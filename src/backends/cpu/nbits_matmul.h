#pragma once
// matmul_nbits' CPU kernels (weights of 2, 4 or 8 bits quantized in blocks
// along K): the float32 product (nbits_matmul.cpp) and the one with a
// rounded to int8 per block, ONNX Runtime's accuracy_level 4
// (nbits_matmul_int8.cpp).
#include <cstdint>

namespace kiln::cpu::nbits {

struct Shape {
  int64_t m, k, n, bits, block, blocks, blob;  // blob: bytes of one block's codes
  int64_t per_byte() const { return 8 / bits; }
  int64_t padded_k() const { return blocks * block; }
};

struct Weights {
  const uint8_t* codes;  // [n, blocks, blob]
  const float* scales;   // [n, blocks]
  const float* zeros;    // [n, blocks], or null: 2^(bits - 1)
  const float* bias;     // [n], or null
};

// Code q at position k of a row's packed codes (low bits first).
inline int32_t code_at(const Shape& s, const uint8_t* row, int64_t k) {
  const int64_t per = s.per_byte();
  return (row[k / per] >> ((k % per) * s.bits)) & ((1 << s.bits) - 1);
}

inline float zero_at(const Shape& s, const Weights& w, int64_t at) {
  return w.zeros ? w.zeros[at] : static_cast<float>(1 << (s.bits - 1));
}

// y [m, n] = a [m, k] by the dequantized weights, a rounded per block to
// int8 first: a_scale = max |a| / 127 over the block, a_q = round(a /
// a_scale) half to even; the products (q - zero) a_q summed in integers,
// times a_scale * scale, summed over the blocks, plus the bias.
void int8_product(const Shape& s, const float* a, const Weights& w, float* y);

}  // namespace kiln::cpu::nbits

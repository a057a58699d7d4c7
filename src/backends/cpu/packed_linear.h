#pragma once
// Float32 linear layers (y = x w^T + b) on weights packed once into
// 16-column panels (gemm_tile.h), with a residual add and a ReLU applied as
// each tile is stored (or, with AVX-512, a GELU). For inference graphs, whose weights are constants:
// a library GEMM packs the weights again on every call.
#include <cstdint>

namespace kiln::cpu {

// Packing once saves most where each call has few rows to amortize a
// library GEMM's packing over; from about 1000 rows oneDNN is faster.
constexpr int64_t kPackedLinearRows = 512;

// The number of floats pack_linear_weights writes: out rounded up to 16, times in.
int64_t packed_linear_weights_size(int64_t out, int64_t in);
// w: [out, in] (row-major) -> panels; columns past `out` in the last panel are zero.
void pack_linear_weights(const float* w, int64_t out, int64_t in, float* packed);
// x: [rows, in]; y: [rows, out]; bias: [out] or null. residual: y holds a
// tensor to add before the ReLU. gelu (AVX-512 only, gemm::swish_in_epilogue):
// GELU after the bias, in place of the ReLU (its tanh form with gelu_tanh).
void packed_linear(const float* x, int64_t rows, int64_t in, int64_t out, const float* packed, const float* bias,
                   float* y, bool residual, bool relu, bool gelu = false, bool gelu_tanh = false);

}  // namespace kiln::cpu

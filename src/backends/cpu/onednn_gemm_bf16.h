#pragma once
// Row-major bfloat16 GEMM through oneDNN's matmul primitive: bfloat16
// operands, float32 accumulation, the result rounded to bfloat16 (AMX or
// AVX512-BF16 instructions where the CPU has them: about twice float32's
// rate on AVX512-BF16). C = op(A) op(B), or C += op(A) op(B) with accumulate.
#include <cstdint>

namespace kiln::cpu::onednn {

// Whether this CPU multiplies bfloat16 natively; without, oneDNN would
// emulate it more slowly than float32, and callers widen instead.
bool native_bf16();

// False when oneDNN has no kernel for the call (the caller widens then).
bool gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
               const uint16_t* b, int64_t ldb, uint16_t* c, int64_t ldc, bool accumulate);

}  // namespace kiln::cpu::onednn

#pragma once
// How a kernel reads and writes each storage type (CUDA sources only):
// float16 and bfloat16 load into float and round once on the store, as the
// CPU computes them; every other type is its own compute type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kiln::cuda {

template <typename S>
struct Stored {
  using C = S;
  static __device__ C load(const S* p) { return *p; }
  static __device__ void store(S* p, C v) { *p = v; }
};
template <>
struct Stored<__half> {
  using C = float;
  static __device__ C load(const __half* p) { return __half2float(*p); }
  static __device__ void store(__half* p, C v) { *p = __float2half_rn(v); }
};
template <>
struct Stored<__nv_bfloat16> {
  using C = float;
  static __device__ C load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
  static __device__ void store(__nv_bfloat16* p, C v) { *p = __float2bfloat16_rn(v); }
};

}  // namespace kiln::cuda

#pragma once
// What Kiln's own CUDA kernels share (CUDA sources only): the block size, the
// grid for a grid-stride loop, the launch check, block-wide sums and maxima
// through warp shuffles and shared memory, and the storage types a launch
// takes by MapDType.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/convert_launch.h"
#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/index_errors.h"
#include "backends/cuda/stored.h"
#include "kiln/error.h"

namespace kiln::cuda {

constexpr int kThreads = 256;  // a multiple of the warp's 32

// `count` blocks, at most 65536: grid-stride loops take the rest.
inline unsigned blocks(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(count, 1), int64_t{1} << 16));
}
// Blocks for a thread per element.
inline unsigned blocks_for(int64_t elements) { return blocks((elements + kThreads - 1) / kThreads); }

inline cudaStream_t stream_of(void* handle) { return static_cast<cudaStream_t>(handle); }

inline void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) KILN_FAIL("CUDA: the ", kernel, " kernel did not launch: ", cudaGetErrorString(status));
}

// Zeroes `bytes` at `p` in the stream's order (a gradient that kernels add into).
inline void zero(void* p, size_t bytes, void* stream) {
  const cudaError_t status = cudaMemsetAsync(p, 0, bytes, stream_of(stream));
  if (status != cudaSuccess) KILN_FAIL("CUDA: cudaMemsetAsync failed: ", cudaGetErrorString(status));
}

// f(S{}) with S the storage type of `dtype`, for kernels of every floating
// dtype, and for those of float32 and float64 only (else an error naming `op`).
template <typename F>
void with_any_float(MapDType dtype, F f) {
  switch (dtype) {
    case MapDType::Float32:
      return f(float{});
    case MapDType::Float64:
      return f(double{});
    case MapDType::Float16:
      return f(__half{});
    case MapDType::BFloat16:
      return f(__nv_bfloat16{});
  }
}
template <typename F>
void with_float_or_double(MapDType dtype, const char* op, F f) {
  if (dtype == MapDType::Float64) return f(double{});
  KILN_CHECK(dtype == MapDType::Float32, "CUDA ", op, ": float32 or float64");
  f(float{});
}

// f(S{}) with S the storage type of any dtype.
template <typename F>
void with_any(AnyDType dtype, F f) {
  switch (dtype) {
    case AnyDType::Float32:
      return f(float{});
    case AnyDType::Float64:
      return f(double{});
    case AnyDType::Float16:
      return f(__half{});
    case AnyDType::BFloat16:
      return f(__nv_bfloat16{});
    case AnyDType::Int32:
      return f(int32_t{});
    case AnyDType::Int64:
      return f(int64_t{});
    case AnyDType::UInt8:
      return f(uint8_t{});
    case AnyDType::Bool:
      return f(bool{});
    case AnyDType::Int8:
      return f(int8_t{});
  }
}

// Records the first out-of-range index a kernel meets (index_errors.h).
__device__ inline void report_bad_index(IndexError* slot, IndexKind kind, int64_t index, int64_t position,
                                        int64_t size) {
  if (slot == nullptr) return;
  if (atomicCAS(reinterpret_cast<int*>(&slot->kind), 0, static_cast<int>(kind)) != 0) return;
  slot->index = index;
  slot->position = position;
  slot->size = size;
}

template <typename T>
__device__ T warp_sum(T v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  return v;
}
template <typename T>
__device__ T warp_max(T v) {
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_down_sync(0xffffffffu, v, d));
  return v;
}

// The block's total (or maximum) of every thread's v, in every thread.
template <typename T, bool kMax>
__device__ T block_combine(T v) {
  __shared__ T partial[kThreads / 32];
  __shared__ T result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    T w = lane < warps ? partial[lane] : (kMax ? -INFINITY : T(0));
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  const T r = result;
  __syncthreads();  // (the next call may reuse the shared slots)
  return r;
}
template <typename T>
__device__ T block_sum(T v) {
  return block_combine<T, false>(v);
}
template <typename T>
__device__ T block_max(T v) {
  return block_combine<T, true>(v);
}

}  // namespace kiln::cuda

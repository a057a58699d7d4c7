// rms_norm (a block per row, the squares summed in double) and swiglu (a
// thread per element) on CUDA, for the package's "cuda" kernels.
#include <cuda_runtime.h>

#include "cuda_kernels.h"

namespace {

constexpr int kThreads = 256;

unsigned grid(int64_t items) { return static_cast<unsigned>(items < 65536 ? (items > 0 ? items : 1) : 65536); }

template <typename T>
__global__ void rms_norm_rows(const T* x, const T* w, T* y, int64_t rows, int64_t d, double eps) {
  __shared__ double partial[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * d;
    double squares = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) squares += static_cast<double>(xr[i]) * xr[i];
    partial[threadIdx.x] = squares;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    const T scale = static_cast<T>(1.0 / sqrt(partial[0] / static_cast<double>(d) + eps));
    __syncthreads();  // (the next row reuses the partial sums)
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) y[r * d + i] = xr[i] * scale * w[i];
  }
}

template <typename T>
__global__ void swiglu_elements(const T* gate, const T* up, T* y, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = gate[i] / (T(1) + exp(-gate[i])) * up[i];
}

const char* launched() {
  const cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

}  // namespace

template <typename T>
const char* launch_rms_norm(const T* x, const T* w, T* y, int64_t rows, int64_t d, double eps, int device,
                            void* stream) {
  if (cudaSetDevice(device) != cudaSuccess) return launched();
  if (rows > 0 && d > 0)
    rms_norm_rows<T><<<grid(rows), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, w, y, rows, d, eps);
  return launched();
}

template <typename T>
const char* launch_swiglu(const T* gate, const T* up, T* y, int64_t n, int device, void* stream) {
  if (cudaSetDevice(device) != cudaSuccess) return launched();
  if (n > 0)
    swiglu_elements<T>
        <<<grid((n + kThreads - 1) / kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, y, n);
  return launched();
}

template const char* launch_rms_norm<float>(const float*, const float*, float*, int64_t, int64_t, double, int, void*);
template const char* launch_rms_norm<double>(const double*, const double*, double*, int64_t, int64_t, double, int,
                                             void*);
template const char* launch_swiglu<float>(const float*, const float*, float*, int64_t, int, void*);
template const char* launch_swiglu<double>(const double*, const double*, double*, int64_t, int, void*);

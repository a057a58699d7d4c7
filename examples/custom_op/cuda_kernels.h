#pragma once
// The package's CUDA kernels (cuda_kernels.cu), built with -DCUSTOM_OPS_CUDA=ON:
// plain launchers, so that only this file's code meets nvcc. Each launches on
// `stream` (the one Kiln gives the kernel) on device `device`, and returns
// CUDA's error message, or nullptr.
#include <cstdint>

template <typename T>
const char* launch_rms_norm(const T* x, const T* w, T* y, int64_t rows, int64_t d, double eps, int device,
                            void* stream);
template <typename T>
const char* launch_swiglu(const T* gate, const T* up, T* y, int64_t n, int device, void* stream);

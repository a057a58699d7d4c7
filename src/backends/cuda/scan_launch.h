#pragma once
// The launches of the cumulative ops (scan_kernels.cu): cumsum and cumprod
// along one axis, forward or reversed, and cumprod's gradient. Plain values
// and C++17, as elementwise_launch.h.
#include <cstdint>

#include "backends/cuda/convert_launch.h"

namespace kiln::cuda {

// Dense x and y [outer, n, inner], each line along the middle axis scanned
// in the storage type's compute type, as the CPU's.
struct ScanCall {
  AnyDType dtype = AnyDType::Float32;
  int64_t outer = 1, n = 1, inner = 1;
  bool reverse = false, product = false;
  void* stream = nullptr;
};
void launch_scan(const ScanCall& call, const void* x, void* y);
// d/dx_k of sum_j g_j y_j, y the cumulative product: (x_0 ... x_{k-1}) S_k
// with S_k = g_k + x_{k+1} S_{k+1}, exact with zeros in x (floating types).
void launch_cumprod_backward(const ScanCall& call, const void* grad, const void* x, void* grad_x);

}  // namespace kiln::cuda

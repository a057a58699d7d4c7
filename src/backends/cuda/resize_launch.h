#pragma once
// The launches of interpolate and its backward (resize_kernels.cu): each
// output pixel a weighted gather over its rows' and columns' taps (the
// axis maps of ops/interpolate_axes.h, computed on the host and copied to
// the device), or the extrapolation value where a map says it falls
// outside; the backward scatters with atomic adds. Plain values and C++17.
#include <cstdint>

#include "backends/cuda/elementwise_launch.h"

namespace kiln::cuda {

struct AxisTaps {
  int64_t taps = 1;
  const int64_t* index = nullptr;    // [out][taps], on the device
  const double* weight = nullptr;    // [out][taps]
  const uint8_t* outside = nullptr;  // [out]
};

struct InterpolateCall {
  MapDType dtype = MapDType::Float32;  // float32 or float64
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  AxisTaps rows, cols;
  double fill = 0;
  void* stream = nullptr;
};
// x [planes, h, w] -> y [planes, oh, ow], both dense.
void launch_interpolate(const InterpolateCall& call, const void* x, void* y);
// grad_y [planes, oh, ow] -> grad_x [planes, h, w] (zeroed first).
void launch_interpolate_backward(const InterpolateCall& call, const void* grad_y, void* grad_x);

}  // namespace kiln::cuda

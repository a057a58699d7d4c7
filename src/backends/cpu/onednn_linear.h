#pragma once
// A linear layer with its bias, a residual add and a ReLU or GELU in one oneDNN
// matmul call (bias and post-ops applied while the output tile is still in
// registers), cached per shape. float32.
#include <cstdint>

namespace kiln::cpu::onednn {

struct LinearCall {
  int64_t rows, in, out;  // x [rows, in], w [out, in] (row-major), y [rows, out]
  bool bias = false;
  bool residual = false;  // y holds a tensor to add and receives x w^T + b + y, before the ReLU
  bool relu = false;
  bool gelu = false;       // GELU (erf form) after the bias, as a post-op
  bool gelu_tanh = false;  // with gelu: its tanh form
};

// False when oneDNN cannot express the call (the caller then runs its own path).
bool linear_forward(const LinearCall& c, const float* x, const float* w, const float* bias, float* y);

}  // namespace kiln::cpu::onednn

// bfloat16 matmul and linear: oneDNN's bfloat16 GEMM (or float32's on
// widened copies where the CPU has no bfloat16 instructions) gives float32's
// products of the same values, rounded once, for every operand layout.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
// Largest difference relative to the float32 result's scale.
double relative_error(const Tensor& got, const Tensor& want) {
  const Tensor g = cast(got, DType::Float32), w = cast(want, DType::Float32);
  const double scale = amax(abs(w)).item<double>() + 1e-30;
  return amax(abs(g - w)).item<double>() / scale;
}

Tensor bf16(const Tensor& t) { return cast(t, DType::BFloat16); }
Tensor widened(const Tensor& t) { return cast(bf16(t), DType::Float32); }
}  // namespace

TEST(BFloat16Matmul, EveryLayoutMatchesFloat32OnTheSameValues) {
  manual_seed(5);
  const Tensor a = randn({37, 64}), b = randn({64, 29}), at = randn({64, 37}), bt = randn({29, 64});
  struct Case {
    const char* name;
    Tensor x, y;
  };
  const Case cases[] = {{"row-major", a, b},
                        {"A transposed", at.transpose(0, 1), b},
                        {"B transposed", a, bt.transpose(0, 1)},
                        {"both transposed", at.transpose(0, 1), bt.transpose(0, 1)},
                        {"batched", randn({3, 37, 64}), randn({3, 64, 29})},
                        {"broadcast B", randn({2, 3, 37, 64}), b}};
  for (const Case& c : cases) {
    const Tensor got = matmul(bf16(c.x), bf16(c.y));
    EXPECT_EQ(got.dtype(), DType::BFloat16) << c.name;
    EXPECT_LT(relative_error(got, matmul(widened(c.x), widened(c.y))), 1.0 / 128) << c.name;
  }
}

TEST(BFloat16Matmul, LinearWithBiasAndItsGradients) {
  manual_seed(6);
  Tensor x = randn({33, 48}), w = randn({20, 48}), b = randn({20});
  const Tensor want = linear(widened(x), widened(w), widened(b));
  const Tensor got = linear(bf16(x), bf16(w), bf16(b));
  EXPECT_EQ(got.dtype(), DType::BFloat16);
  EXPECT_LT(relative_error(got, want), 1.0 / 128);
  // Training in bfloat16: the gradients go through the same GEMMs, transposed.
  Tensor xb = bf16(x), wb = bf16(w);
  wb.set_requires_grad();
  xb.set_requires_grad();
  sum(linear(xb, wb) * linear(xb, wb)).backward();
  Tensor xf = widened(x), wf = widened(w);
  wf.set_requires_grad();
  xf.set_requires_grad();
  sum(linear(xf, wf) * linear(xf, wf)).backward();
  EXPECT_LT(relative_error(wb.grad(), wf.grad()), 1.0 / 32);
  EXPECT_LT(relative_error(xb.grad(), xf.grad()), 1.0 / 32);
}

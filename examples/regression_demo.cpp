// Fits y = 3x - 2 + noise with a tiny two-layer network by plain gradient
// descent, printing the loss as it falls: the tensor API and eager autograd.
#include <cstdio>

#include "kiln/kiln.h"

int main() {
  using namespace kiln;
  manual_seed(7);
  Tensor x = linspace(-2, 2, 256).reshape({256, 1});
  Tensor y = x * 3.0 - 2.0 + randn({256, 1}) * 0.1;

  Tensor w1 = (randn({1, 16}) * 0.5).set_requires_grad();
  Tensor b1 = zeros({16}).set_requires_grad();
  Tensor w2 = (randn({16, 1}) * 0.5).set_requires_grad();
  Tensor b2 = zeros({1}).set_requires_grad();
  std::vector<Tensor> params{w1, b1, w2, b2};

  const double lr = 0.05;
  for (int step = 0; step <= 400; ++step) {
    Tensor pred = matmul(tanh(matmul(x, w1) + b1), w2) + b2;
    Tensor loss = mse_loss(pred, y);
    for (auto& p : params) p.zero_grad();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (auto& p : params) p.add_(p.grad(), -lr);
    }
    if (step % 50 == 0) std::printf("step %3d  loss %.5f\n", step, loss.item<double>());
  }
  Tensor probe = from_vector<float>({-1.0f, 0.0f, 1.0f}, {3, 1});
  Tensor out = matmul(tanh(matmul(probe, w1) + b1), w2) + b2;
  std::printf("f(-1), f(0), f(1) = %s  (target -5, -2, 1)\n", out.reshape({3}).str().c_str());
  return 0;
}

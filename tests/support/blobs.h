#pragma once
// A small classification task for training tests: two well-separated
// Gaussian blobs in 2-D, and an MLP that learns them in a few epochs.
#include <memory>

#include "kiln/kiln.h"

namespace kiln::testing {

inline data::TensorDataset blobs(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor labels = randint(0, 2, {n}, DType::Int64, &g);
  Tensor centers = cast(labels, DType::Float32).reshape({n, 1}) * 4.0 - 2.0;
  return {randn({n, 2}, DType::Float32, &g) + centers, labels};
}

inline std::shared_ptr<nn::SequentialCell> blobs_mlp() {
  return std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Dense>(2, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(16, 2)});
}

inline train::LossFn blobs_loss() {
  return [](const Tensor& out, const Tensor& y) { return cross_entropy(out, y); };
}

}  // namespace kiln::testing

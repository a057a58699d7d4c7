#pragma once
// Readers for the datasets Kiln trains on. In-memory readers return a
// TensorDataset; readers of files too large to hold decoded read per sample.
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// MNIST-format idx files (gzip-compressed or raw). `split` is "train" or
// "test"; images become float32 [N, 1, 28, 28] in [0, 1], labels int64 [N].
TensorDataset load_mnist(const std::string& dir, const std::string& split);
// Fashion-MNIST from Debian's dataset-fashion-mnist (the default directory).
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
TensorDataset load_fashion_mnist(const std::string& split, const std::string& dir = kFashionMnistDir);

}  // namespace kiln::data

#pragma once
// Datasets and batching. This is the in-memory core of the data pipeline:
// readers load a whole dataset into tensors; a BatchIterator shuffles and
// slices it into batches.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/generator.h"
#include "kiln/tensor.h"

namespace kiln::data {

// Inputs and integer labels, first axis = samples.
struct TensorDataset {
  Tensor inputs;
  Tensor labels;
  int64_t size() const { return inputs.defined() ? inputs.shape()[0] : 0; }
};

// Reads MNIST-format idx files (gzip-compressed or raw). `split` is "train" or
// "test"; images become float32 [N, 1, 28, 28] in [0, 1], labels int64 [N].
TensorDataset load_mnist(const std::string& dir, const std::string& split);
// Fashion-MNIST from Debian's dataset-fashion-mnist (the default directory).
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
TensorDataset load_fashion_mnist(const std::string& split, const std::string& dir = kFashionMnistDir);

struct Batch {
  Tensor inputs;
  Tensor labels;
};

// Iterates over a dataset in batches, reshuffling every epoch with its own
// generator, so that a seed fixes the order.
class BatchIterator {
 public:
  BatchIterator(TensorDataset dataset, int64_t batch_size, bool shuffle, bool drop_remainder = false,
                uint64_t seed = 0);
  void start_epoch();        // reshuffles when shuffling is on
  bool next(Batch& batch);   // false at the end of the epoch
  int64_t batches_per_epoch() const;
  int64_t batch_size() const { return batch_size_; }
  const TensorDataset& dataset() const { return dataset_; }

 private:
  TensorDataset dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_remainder_;
  Generator gen_;
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
};

}  // namespace kiln::data

#pragma once
// Classification metrics over logits [N, C] and integer labels [N].
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::train::metrics {

// Fraction of rows whose label is among the k largest logits (ties count against).
double top_k_accuracy(const Tensor& logits, const Tensor& labels, int64_t k);

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int64_t num_classes);
  // Adds a batch: logits [N, C] (argmax is the prediction) or predictions [N].
  void update(const Tensor& logits_or_predictions, const Tensor& labels);
  int64_t count(int64_t label, int64_t predicted) const { return counts_[label * n_ + predicted]; }
  int64_t total() const;
  double accuracy() const;
  double precision(int64_t c) const;  // 0 when nothing was predicted as c
  double recall(int64_t c) const;     // 0 when c never occurs
  double f1(int64_t c) const;
  double macro_f1() const;
  std::string str() const;  // the matrix, rows = labels, columns = predictions

 private:
  int64_t n_;
  std::vector<int64_t> counts_;
};

}  // namespace kiln::train::metrics

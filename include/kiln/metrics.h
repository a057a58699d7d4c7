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
  // Row-major counts, as numbers that add up across ranks, and back.
  std::vector<double> counts() const { return {counts_.begin(), counts_.end()}; }
  void set_counts(const std::vector<double>& counts);

 private:
  int64_t n_;
  std::vector<int64_t> counts_;
};

// A metric accumulated over the batches of an evaluation (Model::eval).
// Outputs are logits [N, C] (or [N, T, C] for sequences, classes last) and
// labels [N] (or [N, T]).
class Metric {
 public:
  virtual ~Metric() = default;
  virtual void reset() = 0;
  virtual void update(const Tensor& outputs, const Tensor& labels) = 0;
  // Named results, e.g. {"precision", 0.9}; a metric may report several.
  virtual std::vector<std::pair<std::string, double>> results() const = 0;
  // The counts its results come from, which add up across the ranks of a
  // data-parallel evaluation (empty: the metric cannot be combined, and
  // each rank reports its own); set_counts puts the sums back.
  virtual std::vector<double> counts() const { return {}; }
  virtual void set_counts(const std::vector<double>&) {}
};

// Top-1 ("accuracy") or top-k ("top<k>_accuracy") accuracy.
class Accuracy : public Metric {
 public:
  explicit Accuracy(int64_t k = 1) : k_(k) {}
  void reset() override { hits_ = total_ = 0; }
  void update(const Tensor& outputs, const Tensor& labels) override;
  std::vector<std::pair<std::string, double>> results() const override;
  std::vector<double> counts() const override { return {hits_, static_cast<double>(total_)}; }
  void set_counts(const std::vector<double>& c) override;

 private:
  int64_t k_;
  double hits_ = 0;
  int64_t total_ = 0;
};

// Macro-averaged precision, recall and F1 over the classes that occur (as a
// label or a prediction), and the confusion matrix.
class ClassificationReport : public Metric {
 public:
  explicit ClassificationReport(int64_t num_classes) : num_classes_(num_classes), matrix_(num_classes) {}
  void reset() override { matrix_ = ConfusionMatrix(num_classes_); }
  void update(const Tensor& outputs, const Tensor& labels) override { matrix_.update(outputs, labels); }
  std::vector<std::pair<std::string, double>> results() const override;
  const ConfusionMatrix& matrix() const { return matrix_; }
  std::vector<double> counts() const override { return matrix_.counts(); }
  void set_counts(const std::vector<double>& c) override { matrix_.set_counts(c); }

 private:
  int64_t num_classes_;
  ConfusionMatrix matrix_;
};

}  // namespace kiln::train::metrics

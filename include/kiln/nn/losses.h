#pragma once
// Losses as cells: construct(outputs, targets) -> loss.
#include <memory>
#include <optional>
#include <string>

#include "kiln/functional.h"

namespace kiln::nn {

class LossCell {
 public:
  virtual ~LossCell() = default;
  virtual Tensor construct(const Tensor& outputs, const Tensor& targets) = 0;
  Tensor operator()(const Tensor& outputs, const Tensor& targets);
  // As Cell::to_float; most often float32, so that a half-precision
  // network's outputs are scored in full precision.
  LossCell& to_float(DType dtype);
  std::optional<DType> compute_dtype() const { return compute_dtype_; }

 private:
  std::optional<DType> compute_dtype_;
};

class CrossEntropyLoss : public LossCell {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions o = {}) : o_(std::move(o)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return cross_entropy(out, y, o_); }

 private:
  CrossEntropyOptions o_;
};

class NLLLoss : public LossCell {
 public:
  explicit NLLLoss(CrossEntropyOptions o = {}) : o_(std::move(o)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return nll_loss(out, y, o_); }

 private:
  CrossEntropyOptions o_;
};

class MSELoss : public LossCell {
 public:
  explicit MSELoss(std::string reduction = "mean") : r_(std::move(reduction)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return mse_loss(out, y, r_); }

 private:
  std::string r_;
};

class L1Loss : public LossCell {
 public:
  explicit L1Loss(std::string reduction = "mean") : r_(std::move(reduction)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return l1_loss(out, y, r_); }

 private:
  std::string r_;
};

class SmoothL1Loss : public LossCell {
 public:
  explicit SmoothL1Loss(double beta = 1.0, std::string reduction = "mean") : beta_(beta), r_(std::move(reduction)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return smooth_l1_loss(out, y, r_, beta_); }

 private:
  double beta_;
  std::string r_;
};

class BCEWithLogitsLoss : public LossCell {
 public:
  explicit BCEWithLogitsLoss(std::string reduction = "mean") : r_(std::move(reduction)) {}
  Tensor construct(const Tensor& out, const Tensor& y) override { return binary_cross_entropy_with_logits(out, y, r_); }

 private:
  std::string r_;
};

}  // namespace kiln::nn

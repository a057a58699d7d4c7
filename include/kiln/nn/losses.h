#pragma once
// Losses as cells: construct(outputs, targets) -> loss.
#include <memory>
#include <string>

#include "kiln/functional.h"

namespace kiln::nn {

class LossCell {
 public:
  virtual ~LossCell() = default;
  virtual Tensor construct(const Tensor& outputs, const Tensor& targets) = 0;
  Tensor operator()(const Tensor& outputs, const Tensor& targets) { return construct(outputs, targets); }
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

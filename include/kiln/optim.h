#pragma once
// Optimizers and learning-rate schedules. Updates run under NoGradGuard and
// change parameters in place, so every handle to a parameter sees them.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 0.01;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  // "SGD", "SGD with momentum", "Adam", "AdamW", "RMSProp": what training
  // checkpoints record, so a resume with another optimizer is refused by name.
  virtual std::string name() const { return "a custom optimizer"; }
  void zero_grad();
  std::vector<ParamGroup>& groups() { return groups_; }
  // Sets the learning rate of every group (schedules call this).
  void set_lr(double lr);
  double lr() const { return groups_.empty() ? 0.0 : groups_[0].lr; }
  int64_t steps() const { return steps_; }

  // Graph mode. Creates every state buffer that eager mode creates lazily (as
  // the zeros that give the same first update) and returns all of them, so a
  // compiled training step can own their updates.
  std::vector<Tensor> prepare_state();
  // Applies one step with one fused in-place op per parameter (sgd_update,
  // adam_update, rmsprop_update); lr[g] is group g's learning rate and `step`
  // the step count after this step, both 0-d float64 tensors read when the op
  // runs. When `loss` is given and is not finite when the update runs, the
  // update is skipped. Returns false when this optimizer has no fused form.
  virtual bool update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                            const Tensor& step, const Tensor& loss = Tensor()) {
    return false;
  }
  // Counts a step applied through update_fused (a skipped one is not counted).
  void count_step() { ++steps_; }

  // The optimizer's state as named tensors ("step", "g0.p3.momentum", ...),
  // for checkpoints; load_state puts it back into an optimizer built over the
  // same parameters, and refuses a state of another shape.
  std::vector<std::pair<std::string, Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

 protected:
  // Per-parameter buffers by name ("momentum", "exp_avg", ...), [group][param].
  virtual std::vector<std::pair<std::string, std::vector<std::vector<Tensor>>*>> buffers() { return {}; }

  // One eager step through update_fused, the ops a compiled training step
  // runs, so an optimizer with a fused form has its formula once, in its
  // kernel: the same numbers in both modes.
  void step_with_update_ops();

  // Calls fn(group, group index, parameter index, gradient) for every
  // parameter that has a gradient, with weight decay (L2) already added when
  // add_weight_decay is set. Runs under NoGradGuard.
  void for_each_gradient(bool add_weight_decay,
                         const std::function<void(ParamGroup&, size_t, size_t, Tensor&)>& fn);

  std::vector<ParamGroup> groups_;
  int64_t steps_ = 0;
};

struct SGDOptions {
  double lr = 0.01, momentum = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  bool update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                    const Tensor& step, const Tensor& loss) override;
  SGD(std::vector<Tensor> params, SGDOptions o);
  SGD(std::vector<ParamGroup> groups, SGDOptions o);
  void step() override;
  std::string name() const override { return o_.momentum > 0 ? "SGD with momentum" : "SGD"; }

 protected:
  std::vector<std::pair<std::string, std::vector<std::vector<Tensor>>*>> buffers() override {
    if (o_.momentum == 0) return {};
    return {{"momentum", &momentum_}};
  }

 private:
  SGDOptions o_;
  std::vector<std::vector<Tensor>> momentum_;  // per group, per parameter
};

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // true: AdamW
};

class Adam : public Optimizer {
 public:
  bool update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                    const Tensor& step, const Tensor& loss) override;
  Adam(std::vector<Tensor> params, AdamOptions o);
  Adam(std::vector<ParamGroup> groups, AdamOptions o);
  void step() override;
  std::string name() const override { return o_.decoupled_weight_decay ? "AdamW" : "Adam"; }

 protected:
  std::vector<std::pair<std::string, std::vector<std::vector<Tensor>>*>> buffers() override {
    return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  }

 private:
  AdamOptions o_;
  std::vector<std::vector<Tensor>> m_, v_;
};

struct RMSPropOptions {
  double lr = 0.01, alpha = 0.99, eps = 1e-8, weight_decay = 0.0, momentum = 0.0;
};

// RMSProp as in PyTorch: v = alpha v + (1 - alpha) g^2; p -= lr g / (sqrt(v) + eps).
class RMSProp : public Optimizer {
 public:
  bool update_fused(const std::vector<std::vector<Tensor>>& grads, const std::vector<Tensor>& lr,
                    const Tensor& step, const Tensor& loss) override;
  RMSProp(std::vector<Tensor> params, RMSPropOptions o);
  void step() override;
  std::string name() const override { return "RMSProp"; }

 protected:
  std::vector<std::pair<std::string, std::vector<std::vector<Tensor>>*>> buffers() override {
    return {{"square_avg", &square_avg_}, {"momentum", &momentum_}};
  }

 private:
  RMSPropOptions o_;
  std::vector<std::vector<Tensor>> square_avg_, momentum_;
};

// AdamW: Adam with decoupled weight decay (default 0.01, as in PyTorch).
std::unique_ptr<Adam> make_adamw(std::vector<Tensor> params, double lr = 1e-3, double weight_decay = 0.01);

// Scales all gradients so that their global L2 norm is at most max_norm; returns the norm before.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace kiln::optim

namespace kiln::optim {

// Learning rate as a function of the step (from 0). Schedules usable per step or per epoch.
using Schedule = std::function<double(int64_t step)>;
// Linear warm-up from 0 over `warmup` steps, then cosine decay to min_lr at `total` steps.
Schedule cosine_schedule(double base_lr, int64_t total, int64_t warmup = 0, double min_lr = 0.0);
// base_lr * gamma^(step / step_size).
Schedule step_schedule(double base_lr, int64_t step_size, double gamma = 0.1);
// base_lr * gamma^(number of milestones <= step); milestones must increase.
Schedule multistep_schedule(double base_lr, std::vector<int64_t> milestones, double gamma = 0.1);
// base_lr * gamma^step.
Schedule exponential_schedule(double base_lr, double gamma);
// (base_lr - end_lr) * (1 - step / total)^power + end_lr, then end_lr after `total` steps.
Schedule polynomial_schedule(double base_lr, int64_t total, double power = 1.0, double end_lr = 0.0);
// values[i] while boundaries[i-1] <= step < boundaries[i]: one more value than boundaries.
Schedule piecewise_constant_schedule(std::vector<int64_t> boundaries, std::vector<double> values);

}  // namespace kiln::optim

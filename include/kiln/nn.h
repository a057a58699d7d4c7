#pragma once
// Cells: the building blocks of networks. A Cell owns named parameters,
// buffers and child cells, and computes its output in `construct`.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/functional.h"
#include "kiln/jit.h"
#include "kiln/tensor.h"

namespace kiln::nn {

class Cell {
 public:
  virtual ~Cell() = default;
  virtual Tensor construct(const Tensor& x) = 0;
  // Runs construct. The first call also checks that every Cell with trainable
  // parameters that this one calls is registered (reachable from the outermost
  // Cell being called), since an unregistered one is silently not trained,
  // saved or listed.
  Tensor operator()(const Tensor& x);

  // Registration: one line each, usually in the constructor.
  Tensor register_parameter(const std::string& name, Tensor value, bool trainable = true);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename C>
  std::shared_ptr<C> register_cell(const std::string& name, std::shared_ptr<C> cell) {
    add_child(name, cell);
    return cell;
  }

  // Computes this cell, and the cells it calls that set none of their own,
  // in `dtype` (MindSpore's to_float): its floating input and the floating
  // inputs of every op inside, parameters included, are cast to it. The
  // parameters stay as they are and take their gradients through the cast;
  // the output is in `dtype`. Ops without a half-precision kernel run their
  // float32 one on widened copies.
  Cell& to_float(DType dtype);
  std::optional<DType> compute_dtype() const { return compute_dtype_; }
  // Computes this cell under autocast in `dtype` (bfloat16 or float16; none:
  // off): each op in the precision its definition asks for (kiln/grad_mode.h),
  // MindSpore's auto_mixed_precision(amp_level="auto"). to_float wins.
  Cell& set_autocast(std::optional<DType> dtype);
  std::optional<DType> autocast() const { return autocast_; }

  void set_train(bool mode = true);
  // Moves every parameter and buffer to `device`, in place: the Cell's own
  // tensor handles (and any views of them) follow.
  void to(Device device);
  // Where its parameters are (the CPU for a Cell without any).
  Device device() const;
  bool training() const { return training_; }

  // Hierarchical names such as "layers.0.weight", in registration order.
  std::vector<std::pair<std::string, Tensor>> parameters_and_names() const;
  std::vector<std::pair<std::string, Tensor>> buffers_and_names() const;
  std::vector<Tensor> trainable_params() const;  // parameters with requires_grad
  int64_t parameter_count(bool trainable_only = false) const;
  // Stops (or restarts) gradient updates of every parameter whose name starts with prefix.
  void freeze(const std::string& prefix = "", bool frozen = true);
  // Calls fn on this cell and every descendant, parents first.
  void apply(const std::function<void(Cell&)>& fn);
  const std::vector<std::pair<std::string, std::shared_ptr<Cell>>>& children() const { return children_; }

  virtual std::string type_name() const { return "Cell"; }
  // "Dense 'encoder.fc1'": the type and the path from the outermost Cell being
  // called (just the type outside a call), for errors that name a layer.
  std::string display_name() const;
  virtual std::string extra_repr() const { return ""; }
  // A table of every parameter and buffer: name, shape, count, trainable.
  std::string summary() const;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Cell> cell);

 private:
  void collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const;

  void check_registered_in_caller() const;
  const std::string& frame_type() const;

  bool training_ = true;
  bool registration_checked_ = false;
  std::optional<DType> compute_dtype_;
  std::optional<DType> autocast_;
  mutable std::string frame_type_;  // type_name(), or the C++ class name for a plain "Cell"
  mutable int library_ = -1;        // whether the dynamic type is one of Kiln's (-1: not known yet)
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Cell>>> children_;
};

using CellPtr = std::shared_ptr<Cell>;

// --- layers ---------------------------------------------------------------------
class Dense : public Cell {
 public:
  Dense(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Dense"; }
  std::string extra_repr() const override;
  // Applies `activation` to every output (MindSpore's Dense(activation=...));
  // it is registered as the child "activation".
  void set_activation(std::shared_ptr<Cell> activation);
  // Quantization-aware training (kiln/nn/quantize_aware.h): the input passes
  // through `input_quantizer` (the child "input_quantizer") and the weights
  // are fake-quantized per output channel, while enabled.
  void set_quantize_aware(std::shared_ptr<Cell> input_quantizer, bool reduce_range = false);
  void enable_fake_quantization(bool enabled) { fake_quantization_ = enabled; }
  Tensor weight, bias;

 private:
  int64_t in_, out_;
  std::shared_ptr<Cell> activation_, input_quantizer_;
  bool fake_quantization_ = false, reduce_range_ = false;
};

struct Conv2dOptions {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2d : public Cell {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  // Quantization-aware training, as Dense's.
  void set_quantize_aware(std::shared_ptr<Cell> input_quantizer, bool reduce_range = false);
  void enable_fake_quantization(bool enabled) { fake_quantization_ = enabled; }
  Tensor weight, bias;

 private:
  int64_t in_, out_, k_;
  Conv2dOptions o_;
  std::shared_ptr<Cell> input_quantizer_;
  bool fake_quantization_ = false, reduce_range_ = false;
};

class BatchNorm2d : public Cell {
 public:
  explicit BatchNorm2d(int64_t channels, double momentum = 0.1, double eps = 1e-5);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm2d"; }
  // Training statistics over the whole batch of every rank of `group` (a
  // dist::handle_of), not this rank's share alone: synchronized batch
  // norm, for data-parallel training with small per-rank batches. -1: off.
  void synchronize_over(int64_t group) { sync_group_ = group; }
  int64_t synchronized_over() const { return sync_group_; }
  Tensor weight, bias, running_mean, running_var;

 private:
  Tensor synchronized(const Tensor& x);
  double momentum_, eps_;
  int64_t sync_group_ = -1;
};

// BatchNorm2d synchronized over the ranks of a group from the start.
class SyncBatchNorm : public BatchNorm2d {
 public:
  SyncBatchNorm(int64_t channels, int64_t group, double momentum = 0.1, double eps = 1e-5)
      : BatchNorm2d(channels, momentum, eps) {
    synchronize_over(group);
  }
  std::string type_name() const override { return "SyncBatchNorm"; }
};

// Synchronizes every BatchNorm2d in `cell` over `group` (a dist::handle_of);
// returns how many there were.
int convert_sync_batchnorm(Cell& cell, int64_t group);

class ReLU : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }
};

class MaxPool2d : public Cell {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false)
      : k_(kernel_size), s_(stride ? stride : kernel_size), p_(padding), ceil_(ceil_mode) {}
  Tensor construct(const Tensor& x) override { return max_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}, ceil_); }
  std::string type_name() const override { return "MaxPool2d"; }

 private:
  int64_t k_, s_, p_;
  bool ceil_;
};

class AdaptiveAvgPool2d : public Cell {
 public:
  explicit AdaptiveAvgPool2d(int64_t output_size) : o_(output_size) {}
  Tensor construct(const Tensor& x) override { return adaptive_avg_pool2d(x, {o_, o_}); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }

 private:
  int64_t o_;
};

class Flatten : public Cell {
 public:
  Tensor construct(const Tensor& x) override { return x.flatten(1); }
  std::string type_name() const override { return "Flatten"; }
};

class Dropout : public Cell {
 public:
  explicit Dropout(double p = 0.5) : p_(p) {}
  Tensor construct(const Tensor& x) override { return dropout(x, p_, training()); }
  std::string type_name() const override { return "Dropout"; }

 private:
  double p_;
};

class SequentialCell : public Cell {
 public:
  SequentialCell() = default;
  explicit SequentialCell(std::vector<CellPtr> cells);
  void append(CellPtr cell);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "SequentialCell"; }
};

// --- initialisers (in place, without recording gradients) ------------------------
namespace init {
void uniform(Tensor& t, double low, double high);
void normal(Tensor& t, double mean = 0.0, double std = 1.0);
void constant(Tensor& t, double value);
void zeros(Tensor& t);
void ones(Tensor& t);
// fan_in and fan_out of a weight [out, in, k...].
std::pair<int64_t, int64_t> fans(const Tensor& weight);
void xavier_uniform(Tensor& t, double gain = 1.0);
// A new tensor drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's default
// for the weights and biases of linear and convolution layers.
Tensor default_uniform(const Shape& shape, int64_t fan_in);
void he_normal(Tensor& t);  // Kaiming normal for ReLU, fan_in
}  // namespace init

}  // namespace kiln::nn

namespace kiln::jit {

// Compiles a Cell's construct. Its parameters and buffers are named in the
// graph and in errors; switching train/eval mode selects another graph.
CompiledFunction compile(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& example_inputs,
                         CompileOptions options = {});

}  // namespace kiln::jit

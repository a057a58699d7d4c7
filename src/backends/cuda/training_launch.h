#pragma once
// The launches of the kernels a training step needs besides the formulas,
// GEMMs and convolutions: sums and means over any axes and softmax
// (reduce_kernels.cu), layer and batch norm and dropout (norm_kernels.cu),
// embedding (index_kernels.cu), the fused cross entropy (loss_kernels.cu),
// the fused SGD, Adam and RMSProp updates (optimizer_kernels.cu), and pooling
// (pool_kernels.cu), with their backward ops. Plain values and C++17, as
// elementwise_launch.h.
#include <cstdint>
#include <vector>

#include "backends/cuda/convert_launch.h"
#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/index_errors.h"

namespace kiln::cuda {

// y[o] = scale * sum over r of x[outer(o) + inner(r)].
struct ReduceCall {
  MapGeometry outer;  // over the outputs: operand 0 the output, 1 the input's kept axes
  MapGeometry inner;  // over the reduced positions: operand 0 the input's reduced axes
  MapDType dtype = MapDType::Float32;
  void* out = nullptr;
  const void* in = nullptr;
  double scale = 1.0;
  void* stream = nullptr;
};
void launch_sum(const ReduceCall& call);

// The reductions that keep an order or an extreme, over any storage type,
// as the CPU's: the maximum and minimum (NaN propagates), the product and
// the integer sum (accumulated in int64, or double for floats), and the
// int64 position of the maximum or minimum along one axis (the first NaN's
// if there is one, else the first of equals). Geometries as ReduceCall's.
// Over floating types, in double, also: log-sum-exp (the maximum where it is
// not finite) and the variance and standard deviation with a correction
// (NaN where the count does not exceed it).
enum class Fold { Sum, Prod, Max, Min, ArgMax, ArgMin, LogSumExp, Var, Std };
struct FoldCall {
  MapGeometry outer, inner;
  AnyDType dtype = AnyDType::Float32;
  Fold fold = Fold::Max;
  int64_t correction = 1;
  void* out = nullptr;
  const void* in = nullptr;
  void* stream = nullptr;
};
void launch_fold(const FoldCall& call);

// Cross entropy of dense logits x [n, c] against int64 targets, with
// optional class weights, ignore_index and label smoothing, as the CPU
// computes it. A target outside [0, c) that is not ignore_index gives a NaN
// loss and is reported through `error` (index_errors.h).
enum class Reduction { None, Sum, Mean };
struct CrossEntropyCall {
  MapDType dtype = MapDType::Float32;  // float32 or float64
  const void* x = nullptr;
  const int64_t* target = nullptr;
  const void* weight = nullptr;  // [c] or null
  int64_t n = 0, c = 0, ignore = -100;
  double smoothing = 0;
  Reduction reduction = Reduction::Mean;
  double* scratch = nullptr;  // 2n + 1 doubles
  IndexError* error = nullptr;
  void* stream = nullptr;
};
// out: n losses (None) or one.
void launch_cross_entropy(const CrossEntropyCall& call, void* out);
// grad_x [n, c] from the loss's gradient (n values for None, else one).
void launch_cross_entropy_backward(const CrossEntropyCall& call, const void* grad, void* grad_x);
// nll_loss of dense log-probabilities x [n, c] on the same call: each row's
// loss -weight[t] x[i, t], reduced as cross entropy's.
void launch_nll_loss(const CrossEntropyCall& call, void* out);

// The pointwise losses of dense x and y of n elements (float32 or float64),
// each term in double as the CPU's: squared and absolute differences,
// smooth L1 (beta), and binary cross entropy of logits against targets;
// reduced to a sum or mean in a fixed order (partials per block, then their
// sum), or written per element.
enum class PointwiseLoss { Squared, Absolute, SmoothL1, LogisticBce };
struct PointwiseLossCall {
  static constexpr int kPartials = 512;
  MapDType dtype = MapDType::Float32;
  PointwiseLoss loss = PointwiseLoss::Squared;
  int64_t n = 0;
  double beta = 1.0;
  Reduction reduction = Reduction::Mean;
  double* partials = nullptr;  // kPartials doubles
  void* stream = nullptr;
};
void launch_pointwise_loss(const PointwiseLossCall& call, const void* x, const void* y, void* out);

// The fused SGD step over n dense elements, in the parameter's type as the
// CPU's kernel: weight decay, momentum (Nesterov's too); skipped whole when
// the guard loss is not finite.
struct SgdCall {
  MapDType dtype = MapDType::Float32;  // float32 or float64
  void* param = nullptr;
  const void* grad = nullptr;
  void* buffer = nullptr;  // momentum buffer, or null
  const double* lr = nullptr;
  const void* loss = nullptr;  // the step's loss (float32 or float64), or null
  bool loss_f64 = false;
  int64_t n = 0;
  double momentum = 0, weight_decay = 0;
  bool nesterov = false;
  void* stream = nullptr;
};
void launch_sgd_update(const SgdCall& call);

// The fused Adam (AdamW when decoupled) step, as the CPU's: lr and step
// read on the device (float64, one value each).
struct AdamCall {
  MapDType dtype = MapDType::Float32;  // float32 or float64
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  const double* lr = nullptr;
  const double* step = nullptr;
  const void* loss = nullptr;
  bool loss_f64 = false;
  int64_t n = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;
  void* stream = nullptr;
};
void launch_adam_update(const AdamCall& call);

// The multi-tensor forms: a group's tensors, per parameter its address, its
// gradient's, its state's (`states` of them: SGD's momentum buffer, or none;
// Adam's two moments; RMSProp's square average and momentum buffer, or the
// first alone) and its element count; the scalars and options come in
// the single-tensor call (its tensor fields unused). A launch takes up to
// kListTensors parameters (their addresses travel in the kernel's
// arguments), each over blocks of its own; a larger group takes several.
constexpr int kListTensors = 24;
struct TensorGroup {
  std::vector<void*> params;
  std::vector<const void*> grads;
  std::vector<void*> states[2];  // [state][parameter]; a state the update goes without: empty
  std::vector<int64_t> n;
};
void launch_sgd_update_many(const SgdCall& options, const TensorGroup& group);
void launch_adam_update_many(const AdamCall& options, const TensorGroup& group);

// The fused RMSProp step, as the CPU's: the square average moved by alpha,
// weight decay, momentum when a buffer is given; lr read on the device.
struct RmsPropCall {
  MapDType dtype = MapDType::Float32;  // float32 or float64
  void* param = nullptr;
  const void* grad = nullptr;
  void* square_avg = nullptr;
  void* buffer = nullptr;  // momentum buffer, or null
  const double* lr = nullptr;
  const void* loss = nullptr;
  bool loss_f64 = false;
  int64_t n = 0;
  double alpha = 0.99, eps = 1e-8, momentum = 0, weight_decay = 0;
  void* stream = nullptr;
};
void launch_rmsprop_update(const RmsPropCall& call);
void launch_rmsprop_update_many(const RmsPropCall& options, const TensorGroup& group);

// Max pooling over dense [planes, h, w] (any floating dtype, the 16-bit
// ones compared in float): each output the maximum of its window (NaN wins)
// and the flat position of it within its plane, as the CPU's; and the
// backward, each gradient added at its position (where mask, if given, is
// positive).
struct PoolCall {
  MapDType dtype = MapDType::Float32;
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool include_pad = true;  // average pooling: padded positions count
  void* stream = nullptr;
};
void launch_max_pool2d(const PoolCall& call, const void* x, void* y, int64_t* indices);
void launch_max_pool2d_backward(const PoolCall& call, const void* grad_y, const int64_t* indices, const void* mask,
                                void* grad_x);
// Average pooling as the CPU's: each window clipped to the padded input,
// divided by its padded size (include_pad) or by the input positions it
// covers; and its backward, each gradient spread over its window.
void launch_avg_pool2d(const PoolCall& call, const void* x, void* y);
void launch_avg_pool2d_backward(const PoolCall& call, const void* grad_y, void* grad_x);
// Adaptive average pooling (output [oh, ow] of each plane, windows as the
// CPU's: rows oy*h/oh up to ceil((oy+1)*h/oh)) and its backward.
void launch_adaptive_avg_pool2d(const PoolCall& call, const void* x, void* y);
void launch_adaptive_avg_pool2d_backward(const PoolCall& call, const void* grad_y, void* grad_x);

// softmax (or log_softmax) of dense x [outer, n, inner] over its middle
// axis, any floating dtype (the 16-bit ones computed in float); x may be y.
struct SoftmaxCall {
  MapDType dtype = MapDType::Float32;
  const void* x = nullptr;
  void* y = nullptr;
  int64_t outer = 1, n = 1, inner = 1;
  bool log = false;
  // Attention's weights (inner 1): with causal_rows L > 0, row r sees the
  // first r % L + 1 positions only; with zero_blind_rows, a row that sees
  // nothing finite is zeros (elsewhere NaN, as the CPU's softmax gives).
  int64_t causal_rows = 0;
  bool zero_blind_rows = false;
  void* stream = nullptr;
};
void launch_softmax(const SoftmaxCall& call);

// layer_norm over the last m values of each of `rows` dense rows (float32
// or float64): biased variance, eps inside the root, optional affine; and
// its backward (the parameters' gradients summed over the rows). Group norm
// is the forward over (sample, group) rows.
struct LayerNormCall {
  MapDType dtype = MapDType::Float32;
  int64_t rows = 0, m = 0;
  double eps = 1e-5;
  const void* weight = nullptr;  // [m] or null (group norm: one per channel)
  const void* bias = nullptr;    // [m] or null
  // Group norm's rows are (sample, group): element k of row r takes affine
  // parameter ((r % row_period) m + k) % affine_period / affine_div. Layer
  // norm's defaults give k.
  int64_t row_period = 1, affine_period = 0, affine_div = 1;  // affine_period 0: m
  void* stream = nullptr;
};
void launch_layer_norm(const LayerNormCall& call, const void* x, void* y, void* mean, void* rstd);
void launch_layer_norm_backward(const LayerNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias);

// Rows of a dense table [rows, dim] by int64 indices (negative ones count
// from the end; one out of range gives a row of NaN and is reported through
// `error`); and the backward, each
// gradient row added into its table row except padding_idx's (float32 or
// float64).
struct EmbeddingCall {
  MapDType dtype = MapDType::Float32;
  int64_t rows = 0, dim = 0, count = 0;  // count: indices
  int64_t padding_idx = -1;
  IndexError* error = nullptr;
  void* stream = nullptr;
};
void launch_embedding(const EmbeddingCall& call, const void* table, const int64_t* indices, void* out);
void launch_embedding_backward(const EmbeddingCall& call, const void* grad, const int64_t* indices, void* grad_table);

// batch_norm over dense x [n, c, inner...] (float32 or float64), per
// channel as the CPU's: in training the batch's mean and biased variance
// (the running statistics, when given, moved by momentum toward the mean and
// the unbiased variance, in place), else the running ones; and the backward.
struct BatchNormCall {
  MapDType dtype = MapDType::Float32;
  int64_t n = 0, c = 0, inner = 0;
  bool training = true;
  double eps = 1e-5, momentum = 0.1;
  const void* weight = nullptr;  // [c] dense, or null
  const void* bias = nullptr;    // [c] dense, or null
  void* running_mean = nullptr;  // strided by running_stride[0] and [1], or null
  void* running_var = nullptr;
  int64_t running_stride[2] = {1, 1};
  void* stream = nullptr;
};
void launch_batch_norm(const BatchNormCall& call, const void* x, void* y, void* mean, void* rstd);
void launch_batch_norm_backward(const BatchNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias);

// Dropout over n dense elements (float32 or float64) as the CPU's: element
// i is kept, scaled by 1 / (1 - p), where philox's number i of the draw
// (seed, first) says so, so one seed gives the same mask on every backend.
struct DropoutCall {
  MapDType dtype = MapDType::Float32;
  int64_t n = 0;
  double p = 0.5;
  uint64_t seed = 0, first = 0;
  // Recorded: {seed, base} read on the device at each run, first = base + relative.
  const uint64_t* state = nullptr;
  uint64_t relative = 0;
  void* stream = nullptr;
};
void launch_dropout(const DropoutCall& call, const void* x, void* y, void* mask);

}  // namespace kiln::cuda

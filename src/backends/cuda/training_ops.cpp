// CUDA kernels for what a training step needs beyond the formulas, the
// GEMMs, the convolutions and the reductions: softmax and log_softmax,
// layer_norm, batch_norm, dropout, embedding, cross_entropy, nll_loss and
// the pointwise losses, sgd_update, adam_update and rmsprop_update,
// max_pool2d, avg_pool2d and adaptive_avg_pool2d, with their backward ops
// (launched as training_launch.h says). Operands a kernel needs dense are
// gathered into scratch memory first.
#include <algorithm>
#include <string>

#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"
#include "kiln/generator.h"
#include "ops/pool_attrs.h"
#include "ops/shape_rules.h"

namespace kiln::cuda {
namespace {

// The class loss's call: dense logits (input `first`), targets and weights.
CrossEntropyCall class_loss(const std::vector<Tensor>& in, size_t first, const Attrs& attrs,
                            const KernelContext& context, std::vector<std::unique_ptr<Scratch>>& keep) {
  const Tensor& x = in[first];
  CrossEntropyCall call;
  call.dtype = map_dtype(x.dtype());
  call.x = dense_data(x, context, keep);
  call.target = static_cast<const int64_t*>(dense_data(in[first + 1], context, keep));
  if (in.size() > first + 2 && in[first + 2].defined()) call.weight = dense_data(in[first + 2], context, keep);
  call.n = x.shape()[0];
  call.c = x.shape()[1];
  call.ignore = attrs.get_int("ignore_index", -100);
  call.smoothing = attrs.get_float("label_smoothing", 0.0);
  const std::string& r = detail::reduction_attr(attrs);
  call.reduction = r == "none" ? Reduction::None : r == "sum" ? Reduction::Sum : Reduction::Mean;
  keep.push_back(std::make_unique<Scratch>(context, static_cast<size_t>(2 * call.n + 1) * sizeof(double)));
  call.scratch = static_cast<double*>(keep.back()->get());
  call.error = index_error_slot(context.device.index);
  call.stream = context.stream.handle;
  return call;
}

void cross_entropy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const CrossEntropyCall call = class_loss(in, 0, attrs, context, keep);
  launch_cross_entropy(call, out[0].device_data());
}

void nll_loss_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const CrossEntropyCall call = class_loss(in, 0, attrs, context, keep);
  launch_nll_loss(call, out[0].device_data());
}

// input, target (one shape): the terms of `loss`, reduced as attrs say.
template <PointwiseLoss kLoss>
void pointwise_loss_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(in[0].shape() == in[1].shape(), "CUDA pointwise losses take an input and target of one shape");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  PointwiseLossCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.loss = kLoss;
  call.n = in[0].numel();
  call.beta = attrs.get_float("beta", 1.0);
  const std::string& r = detail::reduction_attr(attrs);
  call.reduction = r == "none" ? Reduction::None : r == "sum" ? Reduction::Sum : Reduction::Mean;
  keep.push_back(std::make_unique<Scratch>(context, PointwiseLossCall::kPartials * sizeof(double)));
  call.partials = static_cast<double*>(keep.back()->get());
  call.stream = context.stream.handle;
  launch_pointwise_loss(call, dense_data(in[0], context, keep), dense_data(in[1], context, keep),
                        out[0].device_data());
}

void cross_entropy_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const CrossEntropyCall call = class_loss(in, 1, attrs, context, keep);
  KILN_CHECK(out[0].is_contiguous(), "CUDA cross_entropy_backward writes a dense gradient");
  launch_cross_entropy_backward(call, dense_data(in[0], context, keep), out[0].device_data());
}

// param, grad, momentum_buffer?, lr (float64, one value), loss? (the guard).
void sgd_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}})
    KILN_CHECK(!in[i].defined() || in[i].is_contiguous(), "sgd_update: ", i == 0 ? "param" : "momentum_buffer",
               " must be contiguous");
  std::vector<std::unique_ptr<Scratch>> keep;
  SgdCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.buffer = in[2].defined() ? in[2].device_data() : nullptr;
  KILN_CHECK(in[3].dtype() == DType::Float64 && in[3].numel() == 1, "sgd_update: lr must be one float64 value");
  call.lr = static_cast<const double*>(in[3].device_data());
  if (in.size() > 4 && in[4].defined()) {
    call.loss = in[4].device_data();
    call.loss_f64 = in[4].dtype() == DType::Float64;
  }
  call.n = in[0].numel();
  call.momentum = attrs.get_float("momentum", 0);
  call.weight_decay = attrs.get_float("weight_decay", 0);
  call.nesterov = attrs.get_bool("nesterov", false);
  KILN_CHECK(call.buffer || call.momentum == 0, "momentum needs a momentum_buffer");
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_sgd_update(call);
}

// param, grad, square_avg, momentum_buffer?, lr (float64, one value), loss?.
void rmsprop_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}})
    KILN_CHECK(!in[i].defined() || in[i].is_contiguous(), "rmsprop_update: param, square_avg and momentum_buffer ",
               "must be contiguous");
  KILN_CHECK(in[4].dtype() == DType::Float64 && in[4].numel() == 1, "rmsprop_update: lr must be one float64 value");
  std::vector<std::unique_ptr<Scratch>> keep;
  RmsPropCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.square_avg = in[2].device_data();
  call.buffer = in[3].defined() ? in[3].device_data() : nullptr;
  call.lr = static_cast<const double*>(in[4].device_data());
  if (in.size() > 5 && in[5].defined()) {
    call.loss = in[5].device_data();
    call.loss_f64 = in[5].dtype() == DType::Float64;
  }
  call.n = in[0].numel();
  call.alpha = attrs.get_float("alpha");
  call.eps = attrs.get_float("eps");
  call.momentum = attrs.get_float("momentum", 0);
  call.weight_decay = attrs.get_float("weight_decay", 0);
  KILN_CHECK(call.buffer || call.momentum == 0, "momentum needs a momentum_buffer");
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_rmsprop_update(call);
}

// softmax and log_softmax over attrs' axis, of x gathered dense where it is not.
void softmax_over(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs, bool log) {
  const Tensor& x = in[0];
  KILN_CHECK(out[0].is_contiguous(), "CUDA softmax writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const int64_t rank = x.dim(), axis = rank == 0 ? 0 : (attrs.get_int("axis", -1) + rank) % rank;
  SoftmaxCall call;
  call.dtype = map_dtype(x.dtype());
  for (int64_t d = 0; d < rank; ++d) (d < axis ? call.outer : d == axis ? call.n : call.inner) *= x.shape()[d];
  call.x = dense_data(x, context, keep);
  call.y = out[0].device_data();
  call.log = log;
  call.stream = context.stream.handle;
  launch_softmax(call);
}
void softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  softmax_over(in, out, a, false);
}
void log_softmax_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a) {
  softmax_over(in, out, a, true);
}

// layer_norm over the last normalized_ndim axes: rows of m values.
LayerNormCall layer_norm_call(const Tensor& x, const Attrs& attrs, const Tensor* weight, const Tensor* bias,
                              const KernelContext& context, std::vector<std::unique_ptr<Scratch>>& keep) {
  LayerNormCall call;
  call.dtype = map_dtype(x.dtype());
  const int64_t k = attrs.get_int("normalized_ndim");
  call.m = 1;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) call.m *= x.shape()[d];
  call.rows = call.m == 0 ? 0 : x.numel() / call.m;
  call.eps = attrs.get_float("eps", 1e-5);
  if (weight && weight->defined()) call.weight = dense_data(*weight, context, keep);
  if (bias && bias->defined()) call.bias = dense_data(*bias, context, keep);
  call.stream = context.stream.handle;
  return call;
}

void layer_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const LayerNormCall call =
      layer_norm_call(in[0], attrs, in.size() > 1 ? &in[1] : nullptr, in.size() > 2 ? &in[2] : nullptr, context, keep);
  launch_layer_norm(call, dense_data(in[0], context, keep), out[0].device_data(), out[1].device_data(),
                    out[2].device_data());
}

// grad, x, weight?, saved_mean, saved_rstd -> grad_x, grad_weight, grad_bias.
void layer_norm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const LayerNormCall call = layer_norm_call(in[1], attrs, &in[2], nullptr, context, keep);
  launch_layer_norm_backward(call, dense_data(in[0], context, keep), dense_data(in[1], context, keep),
                             dense_data(in[3], context, keep), dense_data(in[4], context, keep), out[0].device_data(),
                             out[1].device_data(), out[2].device_data());
}

// embedding: table [rows, dim], int64 indices of any shape.
void embedding_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  EmbeddingCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.rows = in[0].shape()[0];
  call.dim = in[0].shape()[1];
  call.count = in[1].numel();
  call.error = index_error_slot(context.device.index);
  call.stream = context.stream.handle;
  launch_embedding(call, dense_data(in[0], context, keep),
                   static_cast<const int64_t*>(dense_data(in[1], context, keep)), out[0].device_data());
}

// embedding_backward: grad [..., dim] and the indices into the table's gradient.
void embedding_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  KILN_CHECK(out[0].is_contiguous(), "CUDA embedding_backward writes a dense gradient");
  EmbeddingCall call;
  call.dtype = map_dtype(out[0].dtype());
  call.rows = out[0].shape()[0];
  call.dim = out[0].shape()[1];
  call.count = in[1].numel();
  call.padding_idx = attrs.get_int("padding_idx", -1);
  call.stream = context.stream.handle;
  launch_embedding_backward(call, dense_data(in[0], context, keep),
                            static_cast<const int64_t*>(dense_data(in[1], context, keep)), out[0].device_data());
}

// x, weight?, bias?, running_mean?, running_var? (the running ones written in place in training).
BatchNormCall batch_norm_call(const std::vector<Tensor>& in, size_t x_at, const Tensor* weight, const Attrs& attrs,
                              const KernelContext& context, std::vector<std::unique_ptr<Scratch>>& keep) {
  const Tensor& x = in[x_at];
  BatchNormCall call;
  call.dtype = map_dtype(x.dtype());
  call.n = x.shape()[0];
  call.c = x.shape()[1];
  call.inner = call.c == 0 || call.n == 0 ? 0 : x.numel() / (call.n * call.c);
  call.training = attrs.get_bool("training", true);
  call.eps = attrs.get_float("eps", 1e-5);
  call.momentum = attrs.get_float("momentum", 0.1);
  if (weight && weight->defined()) call.weight = dense_data(*weight, context, keep);
  call.stream = context.stream.handle;
  return call;
}

void batch_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  BatchNormCall call = batch_norm_call(in, 0, in.size() > 1 ? &in[1] : nullptr, attrs, context, keep);
  KILN_CHECK(!call.training || call.n * call.inner > 1,
             "training mode needs more than one value per channel (got "
             "input ",
             in[0].meta_str(), "); use a batch larger than 1 or eval mode");
  if (in.size() > 2 && in[2].defined()) call.bias = dense_data(in[2], context, keep);
  if (in.size() > 4 && in[3].defined() && in[4].defined()) {
    call.running_mean = in[3].device_data();
    call.running_var = in[4].device_data();
    call.running_stride[0] = in[3].strides()[0];
    call.running_stride[1] = in[4].strides()[0];
  }
  launch_batch_norm(call, dense_data(in[0], context, keep), out[0].device_data(), out[1].device_data(),
                    out[2].device_data());
}

// grad, x, weight?, saved_mean, saved_rstd -> grad_x, grad_weight, grad_bias.
void batch_norm_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const BatchNormCall call = batch_norm_call(in, 1, &in[2], attrs, context, keep);
  launch_batch_norm_backward(call, dense_data(in[0], context, keep), dense_data(in[1], context, keep),
                             dense_data(in[3], context, keep), dense_data(in[4], context, keep), out[0].device_data(),
                             out[1].device_data(), out[2].device_data());
}

// The planes and both sizes of a pool: x [n, c, h, w] to y [n, c, oh, ow].
PoolCall planes_of(const Shape& x, const Shape& y, DType dtype, const KernelContext& context) {
  PoolCall call;
  call.dtype = map_dtype(dtype);
  call.planes = x[0] * x[1];
  call.h = x[2];
  call.w = x[3];
  call.oh = y[2];
  call.ow = y[3];
  call.stream = context.stream.handle;
  return call;
}

// ... and the window of a max pool's attributes.
PoolCall pool_call(const Shape& x, const Shape& y, const Attrs& attrs, DType dtype, const KernelContext& context) {
  const Pool2dAttrs a = Pool2dAttrs::of(attrs);
  PoolCall call = planes_of(x, y, dtype, context);
  call.kh = a.kernel[0];
  call.kw = a.kernel[1];
  call.sh = a.stride[0];
  call.sw = a.stride[1];
  call.ph = a.padding[0];
  call.pw = a.padding[1];
  call.dh = a.dilation[0];
  call.dw = a.dilation[1];
  return call;
}

// y and indices from x (gathered dense where it is not).
void max_pool2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const PoolCall call = pool_call(in[0].shape(), out[0].shape(), attrs, in[0].dtype(), context);
  launch_max_pool2d(call, dense_data(in[0], context, keep), out[0].device_data(),
                    static_cast<int64_t*>(out[1].device_data()));
}

// grad_x from grad_y, the forward's indices and an optional mask.
void max_pool2d_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const PoolCall call = planes_of(out[0].shape(), in[0].shape(), out[0].dtype(), context);
  const bool masked = in.size() > 2 && in[2].defined();
  launch_max_pool2d_backward(call, dense_data(in[0], context, keep),
                             static_cast<const int64_t*>(dense_data(in[1], context, keep)),
                             masked ? dense_data(in[2], context, keep) : nullptr, out[0].device_data());
}

void avg_pool2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  PoolCall call = pool_call(in[0].shape(), out[0].shape(), attrs, in[0].dtype(), context);
  call.include_pad = attrs.get_bool("count_include_pad", true);
  launch_avg_pool2d(call, dense_data(in[0], context, keep), out[0].device_data());
}

// grad_y, x (for its shape) -> grad_x.
void avg_pool2d_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  PoolCall call = pool_call(out[0].shape(), in[0].shape(), attrs, out[0].dtype(), context);
  call.include_pad = attrs.get_bool("count_include_pad", true);
  launch_avg_pool2d_backward(call, dense_data(in[0], context, keep), out[0].device_data());
}

// param, grad, exp_avg, exp_avg_sq, lr, step (float64, one value each), loss? (the guard).
void adam_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}})
    KILN_CHECK(in[i].is_contiguous(), "adam_update: param and its moments must be contiguous");
  for (size_t i : {size_t{4}, size_t{5}})
    KILN_CHECK(in[i].dtype() == DType::Float64 && in[i].numel() == 1,
               "adam_update: lr and step are one float64 value each");
  std::vector<std::unique_ptr<Scratch>> keep;
  AdamCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.exp_avg = in[2].device_data();
  call.exp_avg_sq = in[3].device_data();
  call.lr = static_cast<const double*>(in[4].device_data());
  call.step = static_cast<const double*>(in[5].device_data());
  if (in.size() > 6 && in[6].defined()) {
    call.loss = in[6].device_data();
    call.loss_f64 = in[6].dtype() == DType::Float64;
  }
  call.n = in[0].numel();
  call.beta1 = attrs.get_float("beta1");
  call.beta2 = attrs.get_float("beta2");
  call.eps = attrs.get_float("eps");
  call.weight_decay = attrs.get_float("weight_decay", 0);
  call.decoupled = attrs.get_bool("decoupled", false);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_adam_update(call);
}

void adaptive_avg_pool2d_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  launch_adaptive_avg_pool2d(planes_of(in[0].shape(), out[0].shape(), in[0].dtype(), context),
                             dense_data(in[0], context, keep), out[0].device_data());
}

// grad_y, x -> grad_x.
void adaptive_avg_pool2d_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  launch_adaptive_avg_pool2d_backward(planes_of(out[0].shape(), in[0].shape(), out[0].dtype(), context),
                                      dense_data(in[0], context, keep), out[0].device_data());
}

// y and mask from x, the mask drawn from the default generator as on the CPU.
void dropout_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  DropoutCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.n = in[0].numel();
  call.p = attrs.get_float("p");
  Generator& g = default_generator();
  call.seed = g.initial_seed();
  call.first = g.take(static_cast<uint64_t>(call.n));
  call.stream = context.stream.handle;
  launch_dropout(call, dense_data(in[0], context, keep), out[0].device_data(), out[1].device_data());
}

}  // namespace

void register_training_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  reg.kernel("softmax", floats, softmax_kernel);
  reg.kernel("log_softmax", floats, log_softmax_kernel);
  reg.kernel("layer_norm", {DType::Float32, DType::Float64}, layer_norm_kernel);
  reg.kernel("layer_norm_backward", {DType::Float32, DType::Float64}, layer_norm_backward_kernel);
  reg.kernel("batch_norm", {DType::Float32, DType::Float64}, batch_norm_kernel);
  reg.kernel("batch_norm_backward", {DType::Float32, DType::Float64}, batch_norm_backward_kernel);
  reg.kernel("dropout", {DType::Float32, DType::Float64}, dropout_kernel);
  // Indices as int64 (an int32 call runs on the CPU, visibly).
  reg.kernel("embedding", floats, Kernel(embedding_kernel).takes({{}, {DType::Int64}}));
  reg.kernel("embedding_backward", {DType::Float32, DType::Float64},
             Kernel(embedding_backward_kernel).takes({{}, {DType::Int64}}));
  // Targets as int64 (an int32 call runs on the CPU, visibly); the loss in
  // float32 or float64, as the CPU's.
  reg.kernel("cross_entropy", {DType::Float32, DType::Float64},
             Kernel(cross_entropy_kernel).takes({{}, {DType::Int64}}));
  reg.kernel("cross_entropy_backward", {DType::Float32, DType::Float64},
             Kernel(cross_entropy_backward_kernel).takes({{}, {}, {DType::Int64}}));
  reg.kernel("nll_loss", {DType::Float32, DType::Float64}, Kernel(nll_loss_kernel).takes({{}, {DType::Int64}}));
  reg.kernel("mse_loss", {DType::Float32, DType::Float64}, pointwise_loss_kernel<PointwiseLoss::Squared>);
  reg.kernel("l1_loss", {DType::Float32, DType::Float64}, pointwise_loss_kernel<PointwiseLoss::Absolute>);
  reg.kernel("smooth_l1_loss", {DType::Float32, DType::Float64}, pointwise_loss_kernel<PointwiseLoss::SmoothL1>);
  reg.kernel("binary_cross_entropy_with_logits", {DType::Float32, DType::Float64},
             pointwise_loss_kernel<PointwiseLoss::LogisticBce>);
  reg.kernel("sgd_update", {DType::Float32, DType::Float64}, sgd_update_kernel);
  reg.kernel("adam_update", {DType::Float32, DType::Float64}, adam_update_kernel);
  reg.kernel("rmsprop_update", {DType::Float32, DType::Float64}, rmsprop_update_kernel);
  reg.kernel("max_pool2d", floats, max_pool2d_kernel);
  reg.kernel("max_pool2d_backward", floats, max_pool2d_backward_kernel);
  reg.kernel("avg_pool2d", floats, avg_pool2d_kernel);
  reg.kernel("avg_pool2d_backward", floats, avg_pool2d_backward_kernel);
  reg.kernel("adaptive_avg_pool2d", floats, adaptive_avg_pool2d_kernel);
  reg.kernel("adaptive_avg_pool2d_backward", floats, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace kiln::cuda

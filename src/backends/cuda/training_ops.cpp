// CUDA kernels for what a training step needs beyond the formulas, the
// GEMMs, the convolutions, the reductions, the losses, the optimizers and
// pooling: softmax and log_softmax, layer_norm, group_norm, batch_norm,
// dropout and embedding, with their backward ops (launched as training_launch.h says).
// Operands a kernel needs dense are gathered into scratch memory first.
#include <algorithm>

#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

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
  const AroundAxis around = around_axis(x.shape(), axis);
  call.outer = around.outer;
  call.n = around.n;
  call.inner = around.inner;
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

// group_norm: rows of (sample, group), each channel's affine parameters.
void group_norm_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const int64_t n = x.shape()[0], c = x.shape()[1], groups = attrs.get_int("groups");
  const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  LayerNormCall call;
  call.dtype = map_dtype(x.dtype());
  call.rows = n * groups;
  call.m = c / groups * spatial;
  call.eps = attrs.get_float("eps", 1e-5);
  if (in.size() > 1 && in[1].defined()) call.weight = dense_data(in[1], context, keep);
  if (in.size() > 2 && in[2].defined()) call.bias = dense_data(in[2], context, keep);
  call.row_period = groups;
  call.affine_period = std::max<int64_t>(c * spatial, 1);
  call.affine_div = std::max<int64_t>(spatial, 1);
  call.stream = context.stream.handle;
  launch_layer_norm(call, dense_data(x, context, keep), out[0].device_data(), out[1].device_data(),
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

// y and mask from x, the mask drawn as on the CPU: from the default
// generator, or, recorded, from the executor's state at each replay.
void dropout_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  DropoutCall call;
  call.dtype = map_dtype(in[0].dtype());
  call.n = in[0].numel();
  call.p = attrs.get_float("p");
  const RandomDraw draw = take_random(static_cast<uint64_t>(call.n));
  call.seed = draw.seed;
  call.first = draw.first;
  call.state = static_cast<const uint64_t*>(draw.state);
  call.relative = draw.relative;
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
  reg.kernel("group_norm", {DType::Float32, DType::Float64}, group_norm_kernel);
  reg.kernel("batch_norm", {DType::Float32, DType::Float64}, batch_norm_kernel);
  reg.kernel("batch_norm_backward", {DType::Float32, DType::Float64}, batch_norm_backward_kernel);
  reg.kernel("dropout", {DType::Float32, DType::Float64}, dropout_kernel);
  // Indices as int64 (an int32 call runs on the CPU, visibly).
  reg.kernel("embedding", floats, Kernel(embedding_kernel).takes({{}, {DType::Int64}}));
  reg.kernel("embedding_backward", {DType::Float32, DType::Float64},
             Kernel(embedding_backward_kernel).takes({{}, {DType::Int64}}));
}

}  // namespace kiln::cuda

// CUDA kernels of the losses: cross entropy and its backward, nll_loss and
// the pointwise losses (MSE, L1, smooth L1, binary cross entropy with
// logits), launched as training_launch.h says; class targets as int64.
#include <string>

#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"
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
  launch_pointwise_loss(call, dense_data(in[0], context, keep), dense_data(in[1], context, keep), out[0].device_data());
}

void cross_entropy_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const CrossEntropyCall call = class_loss(in, 1, attrs, context, keep);
  KILN_CHECK(out[0].is_contiguous(), "CUDA cross_entropy_backward writes a dense gradient");
  launch_cross_entropy_backward(call, dense_data(in[0], context, keep), out[0].device_data());
}

}  // namespace

void register_loss_kernels(BackendRegistration& reg) {
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
}

}  // namespace kiln::cuda

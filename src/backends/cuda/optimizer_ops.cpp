// CUDA kernels of the optimizers' fused updates: SGD (momentum, Nesterov),
// Adam (AdamW) and RMSProp, in place on contiguous parameters and state, lr
// and step read on the device, skipped whole on a non-finite loss.
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

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

}  // namespace

void register_optimizer_kernels(BackendRegistration& reg) {
  reg.kernel("sgd_update", {DType::Float32, DType::Float64}, sgd_update_kernel);
  reg.kernel("adam_update", {DType::Float32, DType::Float64}, adam_update_kernel);
  reg.kernel("rmsprop_update", {DType::Float32, DType::Float64}, rmsprop_update_kernel);
}

}  // namespace kiln::cuda

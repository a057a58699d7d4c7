// CUDA kernels of the optimizers' fused updates: SGD (momentum, Nesterov),
// Adam (AdamW) and RMSProp, in place on contiguous parameters and state, lr
// and step read on the device, skipped whole on a non-finite loss; each also
// over a group's parameters at once (one launch for up to kListTensors of
// them).
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

// A float64 scalar input (the learning rate or the step count), on the device.
const double* device_scalar(const std::vector<Tensor>& in, size_t at, const char* what) {
  KILN_CHECK(in[at].dtype() == DType::Float64 && in[at].numel() == 1, what, " must be one float64 value");
  return static_cast<const double*>(in[at].device_data());
}

// The loss guard at `at`, where given.
template <typename Call>
void set_loss(Call& call, const std::vector<Tensor>& in, size_t at) {
  if (in.size() <= at || !in[at].defined()) return;
  call.loss = in[at].device_data();
  call.loss_f64 = in[at].dtype() == DType::Float64;
}

// The scalars and options of an SGD call, one parameter's or a group's.
SgdCall sgd_options(const std::vector<Tensor>& in, size_t lr, size_t loss, const Attrs& attrs,
                    const KernelContext& context) {
  SgdCall call;
  call.lr = device_scalar(in, lr, "sgd_update: lr");
  set_loss(call, in, loss);
  call.momentum = attrs.get_float("momentum", 0);
  call.weight_decay = attrs.get_float("weight_decay", 0);
  call.nesterov = attrs.get_bool("nesterov", false);
  call.stream = context.stream.handle;
  return call;
}

// The scalars and options of an Adam call, one parameter's or a group's.
AdamCall adam_options(const std::vector<Tensor>& in, size_t lr, size_t step, size_t loss, const Attrs& attrs,
                      const KernelContext& context) {
  AdamCall call;
  call.lr = device_scalar(in, lr, "adam_update: lr");
  call.step = device_scalar(in, step, "adam_update: step");
  set_loss(call, in, loss);
  call.beta1 = attrs.get_float("beta1");
  call.beta2 = attrs.get_float("beta2");
  call.eps = attrs.get_float("eps");
  call.weight_decay = attrs.get_float("weight_decay", 0);
  call.decoupled = attrs.get_bool("decoupled", false);
  call.stream = context.stream.handle;
  return call;
}

// The scalars and options of an RMSProp call, one parameter's or a group's.
RmsPropCall rmsprop_options(const std::vector<Tensor>& in, size_t lr, size_t loss, const Attrs& attrs,
                            const KernelContext& context) {
  RmsPropCall call;
  call.lr = device_scalar(in, lr, "rmsprop_update: lr");
  set_loss(call, in, loss);
  call.alpha = attrs.get_float("alpha");
  call.eps = attrs.get_float("eps");
  call.momentum = attrs.get_float("momentum", 0);
  call.weight_decay = attrs.get_float("weight_decay", 0);
  call.stream = context.stream.handle;
  return call;
}

// param, grad, momentum_buffer?, lr (float64, one value), loss? (the guard).
void sgd_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}})
    KILN_CHECK(!in[i].defined() || in[i].is_contiguous(), "sgd_update: ", i == 0 ? "param" : "momentum_buffer",
               " must be contiguous");
  std::vector<std::unique_ptr<Scratch>> keep;
  SgdCall call = sgd_options(in, 3, 4, attrs, context);
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.buffer = in[2].defined() ? in[2].device_data() : nullptr;
  call.n = in[0].numel();
  KILN_CHECK(call.buffer || call.momentum == 0, "momentum needs a momentum_buffer");
  OnDevice on(context.device.index);
  launch_sgd_update(call);
}

// param, grad, square_avg, momentum_buffer?, lr (float64, one value), loss?.
void rmsprop_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}})
    KILN_CHECK(!in[i].defined() || in[i].is_contiguous(), "rmsprop_update: param, square_avg and momentum_buffer ",
               "must be contiguous");
  std::vector<std::unique_ptr<Scratch>> keep;
  RmsPropCall call = rmsprop_options(in, 4, 5, attrs, context);
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.square_avg = in[2].device_data();
  call.buffer = in[3].defined() ? in[3].device_data() : nullptr;
  call.n = in[0].numel();
  KILN_CHECK(call.buffer || call.momentum == 0, "momentum needs a momentum_buffer");
  OnDevice on(context.device.index);
  launch_rmsprop_update(call);
}

// param, grad, exp_avg, exp_avg_sq, lr, step (float64, one value each), loss? (the guard).
void adam_update_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}})
    KILN_CHECK(in[i].is_contiguous(), "adam_update: param and its moments must be contiguous");
  std::vector<std::unique_ptr<Scratch>> keep;
  AdamCall call = adam_options(in, 4, 5, 6, attrs, context);
  call.dtype = map_dtype(in[0].dtype());
  call.param = in[0].device_data();
  call.grad = dense_data(in[1], context, keep);
  call.exp_avg = in[2].device_data();
  call.exp_avg_sq = in[3].device_data();
  call.n = in[0].numel();
  OnDevice on(context.device.index);
  launch_adam_update(call);
}

// The tensors of a multi-tensor call (sgd_, adam_ and rmsprop_update_many):
// from input `first`, `count` parameters, their gradients and `states`
// lists of state, each tensor contiguous but the gradients (gathered dense
// into scratch memory that `keep` holds).
TensorGroup group_of(const std::vector<Tensor>& in, size_t first, int64_t count, int states, const char* op,
                     const KernelContext& context, std::vector<std::unique_ptr<Scratch>>& keep) {
  const auto at = [&](int list, int64_t i) -> const Tensor& { return in[first + list * count + i]; };
  TensorGroup group;
  for (int64_t i = 0; i < count; ++i) {
    for (int list = 0; list < 2 + states; ++list)
      KILN_CHECK(list == 1 || at(list, i).is_contiguous(), op, ": parameters and their state must be contiguous");
    group.params.push_back(at(0, i).device_data());
    group.grads.push_back(dense_data(at(1, i), context, keep));
    for (int state = 0; state < states; ++state) group.states[state].push_back(at(2 + state, i).device_data());
    group.n.push_back(at(0, i).numel());
  }
  return group;
}

// lr (float64), loss?, then params, grads and, with momentum, buffers.
void sgd_update_many_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  std::vector<std::unique_ptr<Scratch>> keep;
  SgdCall options = sgd_options(in, 0, 1, attrs, context);
  options.dtype = map_dtype(in[2].dtype());
  const TensorGroup group =
      group_of(in, 2, attrs.get_int("count"), options.momentum != 0 ? 1 : 0, "sgd_update_many", context, keep);
  OnDevice on(context.device.index);
  launch_sgd_update_many(options, group);
}

// lr, step (float64), loss?, then params, grads, exp_avg and exp_avg_sq.
void adam_update_many_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  std::vector<std::unique_ptr<Scratch>> keep;
  AdamCall options = adam_options(in, 0, 1, 2, attrs, context);
  options.dtype = map_dtype(in[3].dtype());
  const TensorGroup group = group_of(in, 3, attrs.get_int("count"), 2, "adam_update_many", context, keep);
  OnDevice on(context.device.index);
  launch_adam_update_many(options, group);
}

// lr (float64), loss?, then params, grads, square_avg and, with momentum, buffers.
void rmsprop_update_many_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  std::vector<std::unique_ptr<Scratch>> keep;
  RmsPropCall options = rmsprop_options(in, 0, 1, attrs, context);
  options.dtype = map_dtype(in[2].dtype());
  const TensorGroup group =
      group_of(in, 2, attrs.get_int("count"), options.momentum != 0 ? 2 : 1, "rmsprop_update_many", context, keep);
  OnDevice on(context.device.index);
  launch_rmsprop_update_many(options, group);
}

}  // namespace

void register_optimizer_kernels(BackendRegistration& reg) {
  reg.kernel("sgd_update", {DType::Float32, DType::Float64}, sgd_update_kernel);
  reg.kernel("adam_update", {DType::Float32, DType::Float64}, adam_update_kernel);
  reg.kernel("rmsprop_update", {DType::Float32, DType::Float64}, rmsprop_update_kernel);
  reg.kernel("sgd_update_many", {DType::Float32, DType::Float64}, sgd_update_many_kernel);
  reg.kernel("adam_update_many", {DType::Float32, DType::Float64}, adam_update_many_kernel);
  reg.kernel("rmsprop_update_many", {DType::Float32, DType::Float64}, rmsprop_update_many_kernel);
}

}  // namespace kiln::cuda

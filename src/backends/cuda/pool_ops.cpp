// CUDA kernels of 2-d pooling: max (with the positions of the maxima),
// average and adaptive average pooling and their backward ops, over
// [n, c, h, w] planes gathered dense where they are not.
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"
#include "ops/pool_attrs.h"

namespace kiln::cuda {
namespace {

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

}  // namespace

void register_pool_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  reg.kernel("max_pool2d", floats, max_pool2d_kernel);
  reg.kernel("max_pool2d_backward", floats, max_pool2d_backward_kernel);
  reg.kernel("avg_pool2d", floats, avg_pool2d_kernel);
  reg.kernel("avg_pool2d_backward", floats, avg_pool2d_backward_kernel);
  reg.kernel("adaptive_avg_pool2d", floats, adaptive_avg_pool2d_kernel);
  reg.kernel("adaptive_avg_pool2d_backward", floats, adaptive_avg_pool2d_backward_kernel);
}

}  // namespace kiln::cuda

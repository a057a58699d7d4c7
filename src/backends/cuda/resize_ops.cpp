// CUDA kernels of interpolate and its backward: the axis maps built on the
// host from the attributes (ops/interpolate_axes.h, as the CPU's kernels
// build them), copied to the device in the call's stream, then one gather
// (or scatter) per output pixel.
#include <cstring>

#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/resize_launch.h"
#include "backends/cuda/scratch.h"
#include "ops/interpolate_axes.h"

namespace kiln::cuda {
namespace {

// Both axes' maps in one block of device memory, which `keep` holds.
void upload_maps(const resize::AxisMap& rows, const resize::AxisMap& cols, InterpolateCall& call,
                 const KernelContext& context, std::vector<std::unique_ptr<Scratch>>& keep) {
  const size_t ri = rows.index.size(), ci = cols.index.size(), ro = rows.outside.size(), co = cols.outside.size();
  std::vector<char> host((ri + ci) * (sizeof(int64_t) + sizeof(double)) + ro + co);
  char* at = host.data();
  auto put = [&at](const void* p, size_t n) {
    if (n > 0) std::memcpy(at, p, n);
    at += n;
  };
  put(rows.index.data(), ri * sizeof(int64_t));
  put(cols.index.data(), ci * sizeof(int64_t));
  put(rows.weight.data(), ri * sizeof(double));
  put(cols.weight.data(), ci * sizeof(double));
  for (bool o : rows.outside) *at++ = o ? 1 : 0;
  for (bool o : cols.outside) *at++ = o ? 1 : 0;
  // A recorded graph would keep reading this host buffer, gone after the call.
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(static_cast<cudaStream_t>(context.stream.handle), &capturing), "cudaStreamIsCapturing");
  KILN_CHECK(capturing == cudaStreamCaptureStatusNone,
             "interpolate copies its sampling maps from host memory at each call, which a CUDA graph cannot hold");
  keep.push_back(std::make_unique<Scratch>(context, host.size()));
  char* device = static_cast<char*>(keep.back()->get());
  check(cudaMemcpyAsync(device, host.data(), host.size(), cudaMemcpyHostToDevice,
                        static_cast<cudaStream_t>(context.stream.handle)),
        "copying interpolate's maps to the device");
  call.rows = {rows.taps, reinterpret_cast<const int64_t*>(device), nullptr, nullptr};
  call.cols = {cols.taps, reinterpret_cast<const int64_t*>(device + ri * sizeof(int64_t)), nullptr, nullptr};
  call.rows.weight = reinterpret_cast<const double*>(device + (ri + ci) * sizeof(int64_t));
  call.cols.weight = reinterpret_cast<const double*>(device + (ri + ci) * sizeof(int64_t) + ri * sizeof(double));
  call.rows.outside = reinterpret_cast<const uint8_t*>(device + (ri + ci) * (sizeof(int64_t) + sizeof(double)));
  call.cols.outside = call.rows.outside + ro;
}

// x [n, c, h, w] (forward's input, or the backward's second) and attrs' size.
InterpolateCall interpolate_call(const Tensor& x, const Attrs& attrs, const KernelContext& context,
                                 std::vector<std::unique_ptr<Scratch>>& keep) {
  InterpolateCall call;
  call.dtype = map_dtype(x.dtype());
  call.planes = x.shape()[0] * x.shape()[1];
  call.h = x.shape()[2];
  call.w = x.shape()[3];
  const auto size = attrs.get_ints("size");
  call.oh = size[0];
  call.ow = size[1];
  call.fill = attrs.get_float("extrapolation_value", 0.0);
  call.stream = context.stream.handle;
  upload_maps(resize::axis_map(attrs, 0, call.h, call.oh), resize::axis_map(attrs, 1, call.w, call.ow), call, context,
              keep);
  return call;
}

void interpolate_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA interpolate writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const InterpolateCall call = interpolate_call(in[0], attrs, context, keep);
  launch_interpolate(call, dense_data(in[0], context, keep), out[0].device_data());
}

// grad_y, x -> grad_x.
void interpolate_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA interpolate_backward writes a dense gradient");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const InterpolateCall call = interpolate_call(in[1], attrs, context, keep);
  launch_interpolate_backward(call, dense_data(in[0], context, keep), out[0].device_data());
}

}  // namespace

void register_resize_kernels(BackendRegistration& reg) {
  reg.kernel("interpolate", {DType::Float32, DType::Float64}, interpolate_kernel);
  reg.kernel("interpolate_backward", {DType::Float32, DType::Float64}, interpolate_backward_kernel);
}

}  // namespace kiln::cuda

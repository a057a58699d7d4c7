// CUDA kernels of the ops that move whole regions: concat (each input
// copied into its part of the output), assign (a broadcast copy into a
// view), pad in every mode and its backward, and slice_backward (zeros, then
// the gradient copied into the sliced positions).
#include <string>

#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "ops/shape_rules.h"

namespace kiln::cuda {
namespace {

// Copies t into the positions of y that start at `start` along `axis` and
// step by `step` there (t's shape elsewhere).
void copy_into(Tensor& y, int64_t axis, int64_t start, int64_t step, const Tensor& t, void* stream) {
  if (t.numel() == 0) return;
  std::vector<int64_t> strides = y.strides();
  const size_t element = y.element_size();
  MapCall call;
  call.out =
      static_cast<char*>(y.device_data()) + start * strides[static_cast<size_t>(axis)] * static_cast<int64_t>(element);
  strides[static_cast<size_t>(axis)] *= step;
  call.geometry = map_geometry(t.shape(), {t.shape(), t.shape()}, {strides, t.strides()});
  call.in[0] = t.device_data();
  call.stream = stream;
  launch_copy(call, element);
}

void concat_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& y = out.at(0);
  const int64_t axis = normalize_axis(attrs.get_int("axis", 0), y.dim());
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  int64_t at = 0;
  for (const Tensor& t : in) {
    copy_into(y, axis, at, 1, t, context.stream.handle);
    at += t.shape()[static_cast<size_t>(axis)];
  }
}

void assign_kernel(const std::vector<Tensor>& in, std::vector<Tensor>&, const Attrs&) {
  Tensor dst = in.at(0);
  const KernelContext context = kernel_context();
  MapCall call = map_call(dst, {in.at(1)}, 1);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_copy(call, dst.element_size());
}

void slice_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& y = out.at(0);
  KILN_CHECK(y.is_contiguous(), "CUDA slice_backward writes a dense gradient");
  const int64_t axis = normalize_axis(attrs.get_int("axis"), y.dim());
  int64_t start = attrs.get_int("start"), end = attrs.get_int("end"), step = attrs.get_int("step", 1), count = 0;
  detail::slice_bounds(y.shape()[static_cast<size_t>(axis)], start, end, step, count);
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  check(cudaMemsetAsync(y.device_data(), 0, static_cast<size_t>(y.numel()) * y.element_size(),
                        static_cast<cudaStream_t>(context.stream.handle)),
        "cudaMemsetAsync");
  if (count > 0) copy_into(y, axis, start, step, in.at(0), context.stream.handle);
}

// The pad of an unpadded shape into a padded one, as attrs say.
PadCall pad_call(const Shape& shape, const Shape& padded, DType dtype, const Attrs& attrs, void* stream) {
  PadCall call;
  KILN_CHECK(shape.size() <= static_cast<size_t>(PadCall::kMaxRank), "CUDA pad takes up to ", PadCall::kMaxRank,
             " axes");
  call.dtype = any_dtype(dtype);
  const std::string mode = attrs.get_string("mode", "constant");
  call.mode = mode == "reflect"     ? PadMode::Reflect
              : mode == "replicate" ? PadMode::Replicate
              : mode == "circular"  ? PadMode::Circular
                                    : PadMode::Constant;
  call.rank = static_cast<int>(shape.size());
  const std::vector<int64_t> pads = attrs.get_ints("pads");
  for (int d = 0; d < call.rank; ++d) {
    call.shape[d] = shape[static_cast<size_t>(d)];
    call.padded[d] = padded[static_cast<size_t>(d)];
  }
  for (size_t i = 0; i < pads.size() / 2; ++i) call.before[call.rank - 1 - static_cast<int>(i)] = pads[2 * i];
  call.value = attrs.get_float("value", 0.0);
  call.stream = stream;
  return call;
}

void pad_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& y = out.at(0);
  const Tensor& x = in.at(0);
  KILN_CHECK(y.is_contiguous(), "CUDA pad writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const PadCall call = pad_call(x.shape(), y.shape(), x.dtype(), attrs, context.stream.handle);
  if (x.dim() == 0) {  // nothing to pad: the one value
    MapCall copy = map_call(y, in, 1);
    copy.stream = context.stream.handle;
    return launch_copy(copy, y.element_size());
  }
  launch_pad(call, dense_data(x, context, keep), y.device_data());
}

void pad_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& grad_x = out.at(0);
  const Tensor& grad_y = in.at(0);
  KILN_CHECK(grad_x.is_contiguous(), "CUDA pad_backward writes a dense gradient");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const PadCall call = pad_call(grad_x.shape(), grad_y.shape(), grad_y.dtype(), attrs, context.stream.handle);
  launch_pad_backward(call, dense_data(grad_y, context, keep), grad_x.device_data());
}

// Mirrored, repeated and wrapped positions add into one element: atomically,
// in float32 and float64.
bool pad_backward_takes(const KernelCall& call, std::string* why) {
  const bool wide = call.dtypes[0] == DType::Float32 || call.dtypes[0] == DType::Float64;
  if (wide || call.attrs.get_string("mode", "constant") == "constant") return true;
  *why = "modes other than constant in 16-bit floats";
  return false;
}

}  // namespace

void register_join_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> all{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                                         DType::Int64,   DType::UInt8,   DType::Bool,    DType::Int8};
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  reg.kernel("concat", all, concat_kernel);
  reg.kernel("assign", all, assign_kernel);
  reg.kernel("pad", all, pad_kernel);
  reg.kernel("pad_backward", floats,
             Kernel(pad_backward_kernel, pad_backward_takes, "modes other than constant in 16-bit floats"));
  reg.kernel("slice_backward", floats, slice_backward_kernel);
}

}  // namespace kiln::cuda

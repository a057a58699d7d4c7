// CUDA kernels of the ops that take every dtype and compute no formula:
// cast, the comparisons, where, tril and triu, and all_finite, with operands
// in any layout.
#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"

namespace kiln::cuda {
namespace {

void cast_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  MapCall call = map_call(out.at(0), in, 1);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_cast(call, any_dtype(in[0].dtype()), any_dtype(out[0].dtype()));
}

template <Comparison kOp>
void compare_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  KILN_CHECK(in[0].dtype() == in[1].dtype(), "CUDA comparisons take operands of one dtype");
  const KernelContext context = kernel_context();
  MapCall call = map_call(out.at(0), in, 2);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_compare(call, any_dtype(in[0].dtype()), kOp);
}

void where_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  MapCall call = map_call(out.at(0), in, 3);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_where(call, any_dtype(out[0].dtype()));
}

template <bool kLower>
void triangle_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& y = out.at(0);
  KILN_CHECK(y.is_contiguous(), "CUDA tril and triu write a dense output");
  const KernelContext context = kernel_context();
  MapCall call = map_call(y, in, 1);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_triangle(call, any_dtype(y.dtype()), y.shape()[y.shape().size() - 2], y.shape().back(),
                  attrs.get_int("diagonal", 0), kLower);
}

// One bool: true, cleared by any input's inf or NaN.
void all_finite_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  bool* flag = static_cast<bool*>(out.at(0).device_data());
  launch_fill(flag, 1, AnyDType::Bool, 1.0, context.stream.handle);
  for (const Tensor& t : in) {
    if (!is_floating(t.dtype())) continue;
    launch_clear_if_non_finite(map_geometry(t.shape(), {t.shape()}, {t.strides()}), any_dtype(t.dtype()),
                               t.device_data(), flag, context.stream.handle);
  }
}

}  // namespace

void register_convert_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> all{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                                         DType::Int64,   DType::UInt8,   DType::Bool,    DType::Int8};
  const std::initializer_list<DType> numbers{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                             DType::Int32,   DType::Int64,   DType::UInt8,   DType::Int8};
  reg.kernel("cast", all, cast_kernel);
  reg.kernel("eq", all, compare_kernel<Comparison::Eq>);
  reg.kernel("ne", all, compare_kernel<Comparison::Ne>);
  reg.kernel("lt", numbers, compare_kernel<Comparison::Lt>);
  reg.kernel("le", numbers, compare_kernel<Comparison::Le>);
  reg.kernel("gt", numbers, compare_kernel<Comparison::Gt>);
  reg.kernel("ge", numbers, compare_kernel<Comparison::Ge>);
  reg.kernel("where", all, where_kernel);
  reg.kernel("all_finite", all, all_finite_kernel);
  reg.kernel("tril", all, triangle_kernel<true>);
  reg.kernel("triu", all, triangle_kernel<false>);
}

}  // namespace kiln::cuda

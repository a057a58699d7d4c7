// CUDA kernels of the reductions: sum and mean over any axes (floating sums
// on launch_sum, integer ones folded in int64), amax, amin, prod, logsumexp,
// var and std over any axes, argmax and argmin along one, and the scans
// cumsum and cumprod (with cumprod's gradient), with operands in any layout.
#include <algorithm>

#include "backends/cuda/on_device.h"
#include "backends/cuda/scan_launch.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/training_kernels.h"
#include "backends/cuda/training_launch.h"
#include "ops/shape_rules.h"

namespace kiln::cuda {
namespace {

// Reducing x over the axes marked in `reduced`: a geometry over the outputs
// (operand 0 the dense output, 1 the input's kept axes), one over the
// reduced positions (operand 0 the input's reduced axes), and their count.
struct Reduction {
  MapGeometry outer, inner;
  int64_t count = 1;
};
Reduction reduction_of(const Tensor& x, const std::vector<bool>& reduced) {
  const int64_t rank = x.dim();
  Shape kept(x.shape()), inner(x.shape());
  std::vector<int64_t> dense(static_cast<size_t>(rank));
  Reduction r;
  int64_t step = 1;
  for (int64_t d = rank; d-- > 0;) {
    const auto u = static_cast<size_t>(d);
    if (reduced[u]) {
      kept[u] = 1;
      r.count *= x.shape()[u];
    } else {
      inner[u] = 1;
    }
    dense[u] = step;
    step *= kept[u];
  }
  r.outer = map_geometry(kept, {kept, kept}, {dense, x.strides()});
  r.inner = map_geometry(inner, {inner}, {x.strides()});
  return r;
}

// attrs' axes (all of them when none).
std::vector<bool> reduced_axes(const Tensor& x, const Attrs& attrs) {
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), attrs.get_ints("axes", {}).empty());
  for (int64_t a : attrs.get_ints("axes", {})) reduced[static_cast<size_t>(normalize_axis(a, rank))] = true;
  return reduced;
}

void fold(const Tensor& x, Tensor& y, const std::vector<bool>& reduced, Fold how, int64_t correction = 1) {
  KILN_CHECK(y.is_contiguous(), "CUDA reductions write dense outputs");
  const KernelContext context = kernel_context();
  const Reduction r = reduction_of(x, reduced);
  FoldCall call;
  call.outer = r.outer;
  call.inner = r.inner;
  call.dtype = any_dtype(x.dtype());
  call.fold = how;
  call.correction = correction;
  call.out = y.device_data();
  call.in = x.device_data();
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_fold(call);
}

// sum (scale 1) and mean: floating ones on launch_sum, integer sums folded.
void reduce(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs, bool mean) {
  const Tensor& x = in[0];
  Tensor& y = out[0];
  const std::vector<bool> reduced = reduced_axes(x, attrs);
  if (!is_floating(x.dtype())) return fold(x, y, reduced, Fold::Sum);
  KILN_CHECK(y.is_contiguous(), "CUDA reductions write dense outputs");
  const KernelContext context = kernel_context();
  const Reduction r = reduction_of(x, reduced);
  ReduceCall call;
  call.outer = r.outer;
  call.inner = r.inner;
  call.dtype = map_dtype(x.dtype());
  call.out = y.device_data();
  call.in = x.device_data();
  call.scale = mean ? 1.0 / static_cast<double>(std::max<int64_t>(r.count, 1)) : 1.0;
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_sum(call);
}
void sum_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  reduce(in, out, attrs, false);
}
void mean_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  reduce(in, out, attrs, true);
}

template <Fold kFold>
void extreme_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const std::vector<bool> reduced = reduced_axes(in[0], attrs);
  if (kFold != Fold::Prod && out[0].numel() > 0)
    KILN_CHECK(reduction_of(in[0], reduced).count > 0, kFold == Fold::Max ? "amax" : "amin",
               " of an empty axis has no identity; reduce a non-empty tensor");
  fold(in[0], out[0], reduced, kFold);
}

template <Fold kFold>
void moments_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  fold(in[0], out[0], reduced_axes(in[0], attrs), kFold, attrs.get_int("correction", 1));
}

// Along attrs' axis (a scalar: position 0).
template <Fold kFold>
void position_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  std::vector<bool> reduced(static_cast<size_t>(x.dim()), false);
  if (x.dim() > 0) reduced[static_cast<size_t>(normalize_axis(attrs.get_int("axis"), x.dim()))] = true;
  fold(x, out[0], reduced, kFold);
}

// The scan of attrs' axis of dense copies (a scalar: one line of one).
ScanCall scan_call(const Tensor& x, const Attrs& attrs, bool product, const KernelContext& context) {
  ScanCall call;
  call.dtype = any_dtype(x.dtype());
  const int64_t axis = x.dim() == 0 ? 0 : normalize_axis(attrs.get_int("axis"), x.dim());
  const AroundAxis around = around_axis(x.shape(), axis);
  call.outer = around.outer;
  call.n = around.n;
  call.inner = around.inner;
  call.reverse = attrs.get_bool("reverse", false);
  call.product = product;
  call.stream = context.stream.handle;
  return call;
}

template <bool kProduct>
void scan_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA scans write a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  launch_scan(scan_call(in[0], attrs, kProduct, context), dense_data(in[0], context, keep), out[0].device_data());
}

// grad, x -> grad_x.
void cumprod_backward_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA cumprod_backward writes a dense gradient");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  launch_cumprod_backward(scan_call(in[1], attrs, true, context), dense_data(in[0], context, keep),
                          dense_data(in[1], context, keep), out[0].device_data());
}

}  // namespace

void register_reduce_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> floats{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  const std::initializer_list<DType> integers{DType::Int32, DType::Int64, DType::UInt8, DType::Int8};
  const std::initializer_list<DType> numbers{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                             DType::Int32,   DType::Int64,   DType::UInt8,   DType::Int8};
  reg.kernel("sum", floats, sum_kernel);
  reg.kernel("sum", integers, sum_kernel);
  reg.kernel("mean", floats, mean_kernel);
  reg.kernel("amax", numbers, extreme_kernel<Fold::Max>);
  reg.kernel("amin", numbers, extreme_kernel<Fold::Min>);
  reg.kernel("prod", floats, extreme_kernel<Fold::Prod>);
  reg.kernel("prod", integers, extreme_kernel<Fold::Prod>);
  reg.kernel("logsumexp", floats, moments_kernel<Fold::LogSumExp>);
  reg.kernel("var", floats, moments_kernel<Fold::Var>);
  reg.kernel("std", floats, moments_kernel<Fold::Std>);
  reg.kernel("cumsum", numbers, scan_kernel<false>);
  reg.kernel("cumprod", numbers, scan_kernel<true>);
  reg.kernel("cumprod_backward", floats, cumprod_backward_kernel);
  reg.kernel("argmax", numbers, position_kernel<Fold::ArgMax>);
  reg.kernel("argmin", numbers, position_kernel<Fold::ArgMin>);
}

}  // namespace kiln::cuda

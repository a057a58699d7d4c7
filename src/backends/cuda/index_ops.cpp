// CUDA kernels of the indexing ops: gather, scatter_add and scatter_reduce
// along an axis (operands in any layout), index_select and one_hot, with
// int64 indices (the dispatcher widens an int32 index on the device first,
// kernel_widening.cpp); and topk. An
// out-of-range index is raised where the host next waits for the device
// (index_errors.h).
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/gather_launch.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "backends/cuda/sort_launch.h"

namespace kiln::cuda {
namespace {

// Along attrs' axis of `indexed` (its strides), over the index's shape.
GatherCall gather_call(const Tensor& indexed, const Tensor& index, const Attrs& attrs, const KernelContext& context) {
  GatherCall call;
  KILN_CHECK(index.dim() <= GatherCall::kMaxRank, "CUDA gather and scatter take up to ", GatherCall::kMaxRank, " axes");
  KILN_CHECK(index.dim() == indexed.dim(), "the index has ", index.dim(), " axes and the tensor ", indexed.dim());
  call.dtype = any_dtype(indexed.dtype());
  call.rank = static_cast<int>(index.dim());
  call.axis = static_cast<int>(normalize_axis(attrs.get_int("axis"), indexed.dim()));
  for (int d = 0; d < call.rank; ++d) {
    call.index_shape[d] = index.shape()[static_cast<size_t>(d)];
    call.strides[d] = indexed.strides()[static_cast<size_t>(d)];
  }
  call.axis_size = indexed.shape()[static_cast<size_t>(call.axis)];
  call.error = index_error_slot(context.device.index);
  call.stream = context.stream.handle;
  return call;
}

void gather_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  KILN_CHECK(out[0].is_contiguous(), "CUDA gather writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const GatherCall call = gather_call(in[0], in[1], attrs, context);
  launch_gather(call, in[0].device_data(), static_cast<const int64_t*>(dense_data(in[1], context, keep)),
                out[0].device_data());
}

// x, index, src: y = x, then each src element combined in where index
// points: added (scatter_add) or as attrs' reduce says (scatter_reduce).
template <bool kReduce>
void scatter_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  Tensor& y = out[0];
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  MapCall copy = map_call(y, in, 1);
  copy.stream = context.stream.handle;
  launch_copy(copy, y.element_size());
  std::vector<std::unique_ptr<Scratch>> keep;
  GatherCall call = gather_call(y, in[1], attrs, context);
  KILN_CHECK(in[2].dim() == in[1].dim(), "the source has ", in[2].dim(), " axes and the index ", in[1].dim());
  for (int d = 0; d < call.rank; ++d) call.src_strides[d] = in[2].strides()[static_cast<size_t>(d)];
  const std::string reduce = kReduce ? attrs.get_string("reduce", "prod") : "add";
  const ScatterReduce how = reduce == "add"    ? ScatterReduce::Add
                            : reduce == "amax" ? ScatterReduce::Max
                            : reduce == "amin" ? ScatterReduce::Min
                                               : ScatterReduce::Prod;
  launch_scatter(call, how, in[2].device_data(), static_cast<const int64_t*>(dense_data(in[1], context, keep)),
                 y.device_data());
}

void index_select_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  KILN_CHECK(out[0].is_contiguous(), "CUDA index_select writes a dense output");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  const int64_t axis = normalize_axis(attrs.get_int("axis"), x.dim());
  SelectCall call;
  call.dtype = any_dtype(x.dtype());
  const AroundAxis around = around_axis(x.shape(), axis);
  call.outer = around.outer;
  call.n = around.n;
  call.inner = around.inner;
  call.m = in[1].numel();
  call.error = index_error_slot(context.device.index);
  call.stream = context.stream.handle;
  launch_index_select(call, dense_data(x, context, keep), static_cast<const int64_t*>(dense_data(in[1], context, keep)),
                      out[0].device_data());
}

void one_hot_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  launch_one_hot(static_cast<const int64_t*>(dense_data(in[0], context, keep)), in[0].numel(),
                 attrs.get_int("num_classes"), static_cast<int64_t*>(out[0].device_data()),
                 index_error_slot(context.device.index), context.stream.handle);
}

// values and indices of the k largest (or smallest) along attrs' axis.
void topk_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const Tensor& x = in[0];
  KILN_CHECK(out[0].is_contiguous() && out[1].is_contiguous(), "CUDA topk writes dense outputs");
  const KernelContext context = kernel_context();
  OnDevice on(context.device.index);
  std::vector<std::unique_ptr<Scratch>> keep;
  TopkCall call;
  call.dtype = any_dtype(x.dtype());
  const int64_t axis = normalize_axis(attrs.get_int("axis", -1), x.dim());
  const AroundAxis around = around_axis(x.shape(), axis);
  call.outer = around.outer;
  call.len = around.n;
  call.inner = around.inner;
  call.k = attrs.get_int("k");
  call.largest = attrs.get_bool("largest", true);
  call.stream = context.stream.handle;
  launch_topk(call, dense_data(x, context, keep), out[0].device_data(), static_cast<int64_t*>(out[1].device_data()),
              [&](size_t bytes) {
                keep.push_back(std::make_unique<Scratch>(context, bytes));
                return keep.back()->get();
              });
}

}  // namespace

void register_index_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> all{DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                                         DType::Int64,   DType::UInt8,   DType::Bool,    DType::Int8};
  const std::vector<std::vector<DType>> int64_index{{}, {DType::Int64}};
  reg.kernel("gather", all, Kernel(gather_kernel).takes(int64_index));
  reg.kernel("index_select", all, Kernel(index_select_kernel).takes(int64_index));
  reg.kernel("scatter_add",
             {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64},
             Kernel(scatter_kernel<false>).takes({{}, {DType::Int64}, {}}));
  reg.kernel("scatter_reduce", {DType::Float32, DType::Float64, DType::Int32, DType::Int64},
             Kernel(scatter_kernel<true>).takes({{}, {DType::Int64}, {}}));
  reg.kernel("one_hot", {DType::Int64}, one_hot_kernel);
  reg.kernel("topk",
             {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8,
              DType::Int8},
             topk_kernel);
}

}  // namespace kiln::cuda

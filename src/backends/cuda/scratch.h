#pragma once
// A CUDA kernel's operands on the host side: their storage type as the
// launches name it, scratch memory for the call (from the device's
// stream-ordered allocator, given back in the stream's order once the call's
// work is queued), and dense copies of operands whose layout a kernel does
// not take.
#include <memory>
#include <vector>

#include "backends/cuda/convert_launch.h"
#include "backends/cuda/elementwise_launch.h"
#include "kiln/backend.h"
#include "kiln/tensor.h"

namespace kiln::cuda {

inline MapDType map_dtype(DType d) {
  switch (d) {
    case DType::Float32:
      return MapDType::Float32;
    case DType::Float64:
      return MapDType::Float64;
    case DType::Float16:
      return MapDType::Float16;
    case DType::BFloat16:
      return MapDType::BFloat16;
    default:
      KILN_FAIL("this CUDA kernel takes floating dtypes, not ", dtype_name(d));
  }
}

inline AnyDType any_dtype(DType d) {
  switch (d) {
    case DType::Float32:
      return AnyDType::Float32;
    case DType::Float64:
      return AnyDType::Float64;
    case DType::Float16:
      return AnyDType::Float16;
    case DType::BFloat16:
      return AnyDType::BFloat16;
    case DType::Int32:
      return AnyDType::Int32;
    case DType::Int64:
      return AnyDType::Int64;
    case DType::UInt8:
      return AnyDType::UInt8;
    case DType::Bool:
      return AnyDType::Bool;
    case DType::Int8:
      return AnyDType::Int8;
  }
  KILN_FAIL("unknown dtype");
}

// The geometry and addresses of writing y from its first `arity` inputs,
// broadcast to its shape (the dtypes are the caller's to set).
inline MapCall map_call(Tensor& y, const std::vector<Tensor>& in, int arity) {
  std::vector<std::vector<int64_t>> shapes{y.shape()}, strides{y.strides()};
  for (int k = 0; k < arity; ++k) {
    shapes.push_back(in[static_cast<size_t>(k)].shape());
    strides.push_back(in[static_cast<size_t>(k)].strides());
  }
  MapCall call;
  call.geometry = map_geometry(y.shape(), shapes, strides);
  call.out = y.device_data();
  for (int k = 0; k < arity; ++k) call.in[k] = in[static_cast<size_t>(k)].device_data();
  return call;
}

// A shape around one of its axes: the sizes before it, along it and after it.
struct AroundAxis {
  int64_t outer = 1, n = 1, inner = 1;
};
inline AroundAxis around_axis(const Shape& shape, int64_t axis) {
  AroundAxis a;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d)
    (d < axis ? a.outer : d == axis ? a.n : a.inner) *= shape[static_cast<size_t>(d)];
  return a;
}

class Scratch {
 public:
  Scratch(const KernelContext& c, size_t nbytes)
      : c_(c), n_(nbytes), p_(nbytes ? c.workspace->allocate_on(c.stream, nbytes) : nullptr) {}
  ~Scratch() {
    if (p_) c_.workspace->deallocate_on(c_.stream, p_, n_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }

 private:
  KernelContext c_;
  size_t n_;
  void* p_;
};

// A row-major operand as it lies in device memory.
struct View {
  const void* data;
  Shape shape;
  std::vector<int64_t> strides;
};
inline View view_of(const Tensor& t) { return {t.device_data(), t.shape(), t.strides()}; }

// A dense copy of `v` broadcast to `shape`, in scratch memory that `keep`
// holds until the call's work is queued.
inline View gathered(const View& v, const Shape& shape, size_t element, const KernelContext& context,
                     std::vector<std::unique_ptr<Scratch>>& keep) {
  std::vector<int64_t> dense(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    dense[d] = step;
    step *= shape[d];
  }
  keep.push_back(std::make_unique<Scratch>(context, static_cast<size_t>(step) * element));
  MapCall copy;
  copy.geometry = map_geometry(shape, {shape, v.shape}, {dense, v.strides});
  copy.out = keep.back()->get();
  copy.in[0] = v.data;
  copy.stream = context.stream.handle;
  launch_copy(copy, element);
  return {copy.out, shape, dense};
}

// t's first element's device address, through a dense copy where t is not dense.
inline const void* dense_data(const Tensor& t, const KernelContext& context,
                              std::vector<std::unique_ptr<Scratch>>& keep) {
  if (t.is_contiguous()) return t.device_data();
  return gathered(view_of(t), t.shape(), t.element_size(), context, keep).data;
}

}  // namespace kiln::cuda

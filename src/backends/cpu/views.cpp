// Views and dense copies for kernels, made directly on the tensor's storage:
// a kernel that needs another layout must not run ops again (no dispatch, no
// gradient recording, nothing for the tracer to see).
#include "backends/cpu/loops.h"

namespace kiln::cpu {

Tensor alias(const Tensor& t, Shape shape, Strides strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl().storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Tensor contiguous(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor dense = Tensor::empty(t.shape(), t.dtype(), t.device());
  strided_copy(t, dense);
  return dense;
}

Tensor permuted(const Tensor& t, const std::vector<int64_t>& order) {
  KILN_ASSERT(static_cast<int64_t>(order.size()) == t.dim(), "permuted: order has the wrong length");
  Shape shape;
  Strides strides;
  for (int64_t d : order) {
    shape.push_back(t.shape()[d]);
    strides.push_back(t.strides()[d]);
  }
  return alias(t, std::move(shape), std::move(strides), t.offset());
}

Tensor expanded(const Tensor& t, const Shape& shape) {
  const int64_t lead = static_cast<int64_t>(shape.size()) - t.dim();
  KILN_ASSERT(lead >= 0, "expanded: fewer axes than the tensor has");
  Strides strides(shape.size(), 0);
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.shape()[d];
    KILN_ASSERT(size == shape[lead + d] || size == 1, "expanded: axis sizes do not broadcast");
    strides[lead + d] = size == 1 && shape[lead + d] != 1 ? 0 : t.strides()[d];
  }
  return alias(t, shape, std::move(strides), t.offset());
}

}  // namespace kiln::cpu

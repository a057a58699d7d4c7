// to_device: a tensor's copy on another backend, as an op so that autograd
// records it (the gradient goes back to the source device) and profiles
// show the transfer. Its kernel is the backend interface's copy_between,
// the same for every pair of backends: each side's backend reaches its own
// memory.
#include <cstring>
#include <vector>

#include "core/device_memory.h"
#include "kiln/backend.h"
#include "ops/op_helpers.h"

namespace kiln::detail {
namespace {

// The elements of a strided tensor whose storage bytes are at `storage`, in
// row-major order, into `dst`.
void gather(const Tensor& t, const char* storage, char* dst) {
  const size_t size = t.element_size();
  const int64_t n = t.numel(), rank = t.dim();
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);
  int64_t at = t.offset();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * size, storage + static_cast<size_t>(at) * size, size);
    for (int64_t d = rank - 1; d >= 0; --d) {  // odometer step
      at += t.strides()[d];
      if (++index[d] < t.shape()[d]) break;
      at -= index[d] * t.strides()[d];
      index[d] = 0;
    }
  }
}

void to_device_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const Tensor& x = in[0];
  const size_t bytes = static_cast<size_t>(x.numel()) * x.element_size();
  if (x.is_contiguous()) {
    copy_between(out[0].device(), device_address(out[0]), x.device(), device_address(x), bytes);
    return;
  }
  // A strided view (a compiled graph's transfer of a transposed value): its
  // elements gathered on the host, from its storage's bytes there.
  const StorageImpl& from = *x.impl().storage;
  std::vector<char> staged;
  const char* storage = static_cast<const char*>(from.data);
  if (!host_readable(x.device())) {
    staged.resize(from.nbytes);
    copy_between(cpu_device(), staged.data(), x.device(), from.data, from.nbytes);
    storage = staged.data();
  }
  if (host_readable(out[0].device())) {
    gather(x, storage, static_cast<char*>(device_address(out[0])));
  } else {
    std::vector<char> dense(bytes);
    gather(x, storage, dense.data());
    copy_between(out[0].device(), device_address(out[0]), cpu_device(), dense.data(), bytes);
  }
}

OpDefiner d_to_device(make_op(
    "to_device", {"x"}, {"device:string"},
    [](const Metas& in, const Attrs& a) -> Metas {
      TensorMeta m = in[0];
      m.device = parse_device(a.get_string("device", ""));
      return {m};
    },
    [](const GradContext& c, const Grads& g) -> Grads { return {g[0].to(c.inputs[0].device())}; }, {},
    kTagTransfer));

#define KILN_ALL_DTYPES                                                                                    \
  DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8, \
      DType::Bool, DType::Int8
KILN_REGISTER_KERNEL("to_device", CPU, to_device_kernel, KILN_ALL_DTYPES);
KILN_REGISTER_KERNEL("to_device", Reference, to_device_kernel, KILN_ALL_DTYPES);
#undef KILN_ALL_DTYPES

}  // namespace
}  // namespace kiln::detail

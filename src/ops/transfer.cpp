// to_device: a tensor's copy on another backend, as an op so that autograd
// records it (the gradient goes back to the source device) and profiles
// show the transfer. Its kernel is the backend interface's copy_between,
// the same for every pair of backends: each side's backend reaches its own
// memory.
#include "core/device_memory.h"
#include "kiln/backend.h"
#include "ops/op_helpers.h"

namespace kiln::detail {
namespace {

void to_device_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  KILN_CHECK(in[0].is_contiguous(), "to_device copies contiguous tensors; call .contiguous() first (Tensor::to does)");
  copy_between(out[0].device(), device_address(out[0]), in[0].device(), device_address(in[0]),
               static_cast<size_t>(in[0].numel()) * in[0].element_size());
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

// float16 and bfloat16 for ops whose kernels on a device stop at float32
// (the CPU's or an accelerator's): the float32 kernel runs on float32 copies
// and its results are rounded back, so every float op takes half-precision
// tensors (Cell::to_float, models stored in half precision) with float32
// arithmetic inside, as half-precision hardware accumulates in float.
#include "kiln/functional.h"
#include "kiln/grad_mode.h"
#include "ops/dispatch_internal.h"

namespace kiln {
namespace {

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

}  // namespace

KernelFn widening_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs, DType dtype,
                         const Attrs& attrs) {
  if (!is_half(dtype) || op.has_tag(kTagView)) return nullptr;
  if (device.type == DeviceType::CPU)
    return op.kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)];
  std::vector<std::optional<DType>> wide = inputs;
  for (auto& d : wide)
    if (d && is_half(*d)) d = DType::Float32;
  std::string unused;
  return device_kernel(op, device, wide, DType::Float32, attrs, &unused);
}

void run_widened(const OpDef& op, KernelFn f32, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                 const Attrs& attrs) {
  NoGradGuard no_grad;
  std::vector<Tensor> wide(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    wide[i] = inputs[i].defined() && is_half(inputs[i].dtype()) ? cast(inputs[i], DType::Float32) : inputs[i];
  std::vector<Tensor> wide_out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    wide_out[i] = is_half(outputs[i].dtype()) ? Tensor::empty(outputs[i].shape(), DType::Float32, outputs[i].device())
                                              : outputs[i];
  f32(wide, wide_out, attrs);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (is_half(outputs[i].dtype())) outputs[i].copy_(wide_out[i]);
  if (op.writes_with(attrs))
    for (int w : op.writes)
      if (static_cast<size_t>(w) < inputs.size() && inputs[w].defined() && is_half(inputs[w].dtype()))
        Tensor(inputs[w]).copy_(wide[w]);
}

}  // namespace kiln

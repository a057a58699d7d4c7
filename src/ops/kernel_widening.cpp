// Calls a device's kernel takes once some inputs are widened, rather than
// falling back to the CPU:
// - float16 and bfloat16 for ops whose kernels on a device stop at float32
//   (the CPU's or an accelerator's): the float32 kernel runs on float32
//   copies and its results are rounded back, so every float op takes
//   half-precision tensors (Cell::to_float, models stored in half precision)
//   with float32 arithmetic inside, as half-precision hardware accumulates in
//   float;
// - int32 indices for kernels that declare an input int64 only (gather,
//   index_select, scatter, embedding and the losses' targets on CUDA): the
//   index is widened on the device, so models that index with int32
//   (MindSpore's default) stay there.
#include <algorithm>

#include "kiln/functional.h"
#include "kiln/grad_mode.h"
#include "ops/dispatch_internal.h"

namespace kiln {
namespace {

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// Whether input i, of dtype `given`, is an int32 index that kernel k takes
// as int64 only.
bool widens_index(const Kernel& k, size_t i, std::optional<DType> given) {
  return given && *given == DType::Int32 && i < k.input_dtypes.size() &&
         k.input_dtypes[i] == std::vector<DType>{DType::Int64};
}

// The device's kernel for the call with its int32 indices widened, at its
// own dtype or (to_float, half precision) at float32 with its
// half-precision inputs widened too; null where that is not a new call or
// the kernel does not take it.
KernelFn widened_call_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs,
                             DType dtype, const Attrs& attrs, bool to_float) {
  const DType run = to_float ? DType::Float32 : dtype;
  const Kernel& k = op.kernels[static_cast<int>(device.type)][static_cast<int>(run)];
  std::vector<std::optional<DType>> wide = inputs;
  bool widened = to_float;
  for (size_t i = 0; i < wide.size(); ++i) {
    if (to_float && wide[i] && is_half(*wide[i])) wide[i] = DType::Float32;
    if (widens_index(k, i, wide[i])) wide[i] = DType::Int64, widened = true;
  }
  std::string unused;
  return widened ? device_kernel(op, device, wide, run, attrs, &unused) : nullptr;
}

}  // namespace

KernelFn widening_kernel(const OpDef& op, Device device, const std::vector<std::optional<DType>>& inputs, DType dtype,
                         const Attrs& attrs, Widening* how) {
  if (op.has_tag(kTagView)) return nullptr;
  KernelFn f = nullptr;
  Widening chosen = Widening::Float32;
  if (device.type == DeviceType::CPU) {
    if (is_half(dtype)) f = op.kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(DType::Float32)].fn;
  } else if ((f = widened_call_kernel(op, device, inputs, dtype, attrs, false)) != nullptr) {
    // The call's own dtype with its indices widened first: a half-precision
    // kernel that takes int64 indices keeps its precision.
    chosen = Widening::Indices;
  } else if (is_half(dtype)) {
    f = widened_call_kernel(op, device, inputs, dtype, attrs, true);
  }
  if (f != nullptr && how != nullptr) *how = chosen;
  return f;
}

void run_widened(const OpDef& op, KernelFn kernel, Widening how, const std::vector<Tensor>& inputs,
                 std::vector<Tensor>& outputs, const Attrs& attrs) {
  NoGradGuard no_grad;
  const Tensor& d = inputs[static_cast<size_t>(op.dispatch_input)];
  const bool half = how == Widening::Float32 && is_half(d.dtype());
  // The kernel whose declared dtypes say which int32 inputs are indices
  // (none on the CPU, whose kernels take int32 indices).
  const Kernel* k =
      d.device().type == DeviceType::CPU
          ? nullptr
          : &op.kernels[static_cast<int>(d.device().type)][static_cast<int>(half ? DType::Float32 : d.dtype())];
  std::vector<Tensor> wide(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined()) continue;
    if (half && is_half(t.dtype()))
      wide[i] = cast(t, DType::Float32);
    else if (k && widens_index(*k, i, t.dtype()))
      wide[i] = cast(t, DType::Int64);
    else
      wide[i] = t;
  }
  std::vector<Tensor> wide_out(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i)
    wide_out[i] = half && is_half(outputs[i].dtype())
                      ? Tensor::empty(outputs[i].shape(), DType::Float32, outputs[i].device())
                      : outputs[i];
  kernel(wide, wide_out, attrs);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (wide_out[i].dtype() != outputs[i].dtype()) outputs[i].copy_(wide_out[i]);
  for (int w : op.written(attrs, inputs.size()))
    if (static_cast<size_t>(w) < inputs.size() && inputs[w].defined() && wide[w].dtype() != inputs[w].dtype())
      Tensor(inputs[w]).copy_(cast(wide[w], inputs[w].dtype()));
}

}  // namespace kiln

// CUDA kernels of the elementwise ops on integers (their floating forms are
// the formulas' kernels) and of mod on every numeric type, with operands in
// any layout, as the CPU's.
#include "backends/cuda/arithmetic_launch.h"
#include "backends/cuda/convert_kernels.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"

namespace kiln::cuda {
namespace {

template <Arithmetic kOp, int kArity>
void arithmetic_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const KernelContext context = kernel_context();
  ArithmeticCall call;
  call.map = map_call(out.at(0), in, kArity);
  call.map.stream = context.stream.handle;
  call.dtype = any_dtype(out[0].dtype());
  call.op = kOp;
  call.fmod = attrs.get_bool("fmod", false);
  call.has_min = attrs.has("min");
  call.has_max = attrs.has("max");
  if (call.has_min) call.min = attrs.get_float("min");
  if (call.has_max) call.max = attrs.get_float("max");
  call.error = index_error_slot(context.device.index);
  OnDevice on(context.device.index);
  launch_arithmetic(call);
}

}  // namespace

void register_arithmetic_kernels(BackendRegistration& reg) {
  const std::initializer_list<DType> integers{DType::Int32, DType::Int64, DType::UInt8, DType::Int8};
  const std::initializer_list<DType> signed_integers{DType::Int32, DType::Int64, DType::Int8};
  reg.kernel("add", integers, arithmetic_kernel<Arithmetic::Add, 2>);
  reg.kernel("sub", integers, arithmetic_kernel<Arithmetic::Sub, 2>);
  reg.kernel("mul", integers, arithmetic_kernel<Arithmetic::Mul, 2>);
  reg.kernel("div", integers, arithmetic_kernel<Arithmetic::Div, 2>);
  reg.kernel("maximum", integers, arithmetic_kernel<Arithmetic::Maximum, 2>);
  reg.kernel("minimum", integers, arithmetic_kernel<Arithmetic::Minimum, 2>);
  reg.kernel("mod", integers, arithmetic_kernel<Arithmetic::Mod, 2>);
  reg.kernel("mod", {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16},
             arithmetic_kernel<Arithmetic::Mod, 2>);
  reg.kernel("neg", signed_integers, arithmetic_kernel<Arithmetic::Neg, 1>);
  reg.kernel("abs", signed_integers, arithmetic_kernel<Arithmetic::Abs, 1>);
  reg.kernel("sign", signed_integers, arithmetic_kernel<Arithmetic::Sign, 1>);
  reg.kernel("relu", signed_integers, arithmetic_kernel<Arithmetic::Relu, 1>);
  reg.kernel("clamp", signed_integers, arithmetic_kernel<Arithmetic::Clamp, 1>);
}

}  // namespace kiln::cuda

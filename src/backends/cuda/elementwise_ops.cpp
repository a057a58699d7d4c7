// CUDA kernels for every op with an elementwise formula: the op's functor
// (OpDef::math.formula names it) built from the call's attributes, its
// operands' layout as a MapGeometry, and the launch compiled for it in
// elementwise_kernels.cu; and copy, between any layouts of one shape.
#include <cstring>

#include "backends/cuda/elementwise_kernels.h"
#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/on_device.h"
#include "backends/cuda/scratch.h"
#include "kiln/backend.h"
#include "ops/elementwise_formulas.h"

namespace kiln::cuda {
namespace {

template <class F>
void formula_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  const F f(attrs);  // reads (and checks) the attributes on the host
  const KernelContext context = kernel_context();
  MapCall call = map_call(out.at(0), in, F::kArity);
  call.dtype = map_dtype(out[0].dtype());
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_map(f, call);
}

// Any layout into the output's, any dtype.
void copy_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs&) {
  const KernelContext context = kernel_context();
  MapCall call = map_call(out.at(0), in, 1);
  call.stream = context.stream.handle;
  OnDevice on(context.device.index);
  launch_copy(call, out[0].element_size());
}

struct FormulaKernel {
  const char* formula;
  KernelFn kernel;
};
#define KILN_FORMULA_KERNEL(F) {#F, &formula_kernel<formulas::F>},
constexpr FormulaKernel kFormulaKernels[] = {KILN_FORMULAS(KILN_FORMULA_KERNEL)};
#undef KILN_FORMULA_KERNEL

}  // namespace

void register_elementwise_kernels(BackendRegistration& reg) {
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (!op->math || op->math.formula == nullptr) continue;
    for (const FormulaKernel& k : kFormulaKernels)
      if (std::strcmp(k.formula, op->math.formula) == 0)
        reg.kernel(op->name, {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}, k.kernel);
  }
  reg.kernel("copy",
             {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8,
              DType::Bool, DType::Int8},
             copy_kernel);
}

}  // namespace kiln::cuda

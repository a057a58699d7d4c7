// swiglu(gate, up) = silu(gate) * up, the gated unit of LLaMA-style MLPs, as
// one fused elementwise op: one pass over memory instead of three, and graph
// mode fuses it further with the elementwise ops around it. The formula is
// compiled with -ffast-math (CMakeLists.txt), so the loops call glibc's
// vector exp.
#include <cmath>
#include <string>

#include "custom_ops.h"

namespace {

using kiln::plugin::DType;
using kiln::plugin::Tensor;

template <typename T>
void swiglu_block(const T* const* in, T* out, int64_t n, const kiln_attrs*) {
  const T* gate = in[0];
  const T* up = in[1];
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (T(1) + std::exp(-gate[i])) * up[i];
}

#ifdef CUSTOM_OPS_CUDA
// On a GPU, which runs no formula: one kernel over the elements.
template <typename T>
void swiglu_cuda(kiln::plugin::KernelContext& k) {
  Tensor gate = k.input(0).contiguous(), up = k.input(1).contiguous(), y = k.output(0);
  if (const char* error =
          launch_swiglu(gate.data<T>(), up.data<T>(), y.data<T>(), gate.numel(), gate.device_index(), k.stream()))
    throw kiln::plugin::Error(std::string("swiglu on CUDA: ") + error);
}
#endif

}  // namespace

void define_swiglu(kiln::plugin::Registry& reg) {
  reg.op("swiglu")
      .inputs({"gate", "up"})
      .outputs({"y"})
      .elementwise(2, swiglu_block<float>, swiglu_block<double>)
      .tags(kiln::plugin::kElementwise | kiln::plugin::kFusible)
      .infer([](kiln::plugin::InferContext& c) {
        const auto& gate = c.input(0);
        const auto& up = c.input(1);
        if (gate.shape != up.shape || gate.dtype != up.dtype)
          throw kiln::plugin::Error("swiglu takes gate and up of one shape and dtype");
        if (gate.dtype != DType::Float32 && gate.dtype != DType::Float64 && gate.dtype != DType::Float16 &&
            gate.dtype != DType::BFloat16)
          throw kiln::plugin::Error("swiglu takes floating tensors");
        c.set_output(0, gate);
      })
      .grad([](kiln::plugin::GradContext& g) {
        // d/dgate = up * s * (1 + gate * (1 - s)) with s = sigmoid(gate).
        Tensor gate = g.input(0), up = g.input(1), dy = g.output_grad(0);
        Tensor s = kiln::plugin::call1("sigmoid", {gate});
        Tensor one = kiln::plugin::full({}, 1.0, gate.dtype());
        if (g.needs_grad(0)) g.set_input_grad(0, dy * up * s * (one + gate * (one - s)));
        if (g.needs_grad(1)) g.set_input_grad(1, dy * gate * s);
      })
#ifdef CUSTOM_OPS_CUDA
      .kernel("cuda", DType::Float32, swiglu_cuda<float>)
      .kernel("cuda", DType::Float64, swiglu_cuda<double>)
#endif
      .onnx("com.kiln.custom", "SwiGLU", 1);
}

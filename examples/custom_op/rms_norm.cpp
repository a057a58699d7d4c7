// rms_norm(x, weight) = x / sqrt(mean(x^2 over the last axis) + eps) * weight,
// as in LLaMA-style Transformers. A CPU kernel per float type (and a CUDA one
// where the package is built with them); the gradient is written with Kiln
// ops, so it has gradients of its own too, on any device.
#include <algorithm>
#include <cmath>
#include <string>

#include "custom_ops.h"

namespace {

using kiln::plugin::DType;
using kiln::plugin::Tensor;

template <typename T>
void rms_norm_rows(const T* x, const T* w, T* y, int64_t rows, int64_t d, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    T squares = 0;
#pragma omp simd reduction(+ : squares)
    for (int64_t i = 0; i < d; ++i) squares += xr[i] * xr[i];
    const T scale = T(1) / std::sqrt(squares / T(d) + T(eps));
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * scale * w[i];
  }
}

template <typename T>
void rms_norm_kernel(kiln::plugin::KernelContext& k) {
  Tensor x = k.input(0).contiguous(), w = k.input(1).contiguous(), y = k.output(0);
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  const double eps = k.attrs().get_float("eps");
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  T* yp = y.data<T>();
  // Rows in parallel on Kiln's threads, at least ~32K elements per chunk.
  kiln::plugin::parallel_for(rows, std::max<int64_t>(1, 32768 / std::max<int64_t>(d, 1)), [&](int64_t b, int64_t e) {
    rms_norm_rows(xp + b * d, wp, yp + b * d, e - b, d, eps);
  });
}

#ifdef CUSTOM_OPS_CUDA
// On a GPU: the same rows, launched on the stream Kiln gives the call.
template <typename T>
void rms_norm_cuda(kiln::plugin::KernelContext& k) {
  Tensor x = k.input(0).contiguous(), w = k.input(1).contiguous(), y = k.output(0);
  const int64_t d = x.size(-1), rows = d == 0 ? 0 : x.numel() / d;
  if (const char* error = launch_rms_norm(x.data<T>(), w.data<T>(), y.data<T>(), rows, d, k.attrs().get_float("eps"),
                                          x.device_index(), k.stream()))
    throw kiln::plugin::Error(std::string("rms_norm on CUDA: ") + error);
}
#endif

Tensor reduce(const char* op, const Tensor& t, std::vector<int64_t> axes, bool keepdim) {
  kiln::plugin::Attrs a;
  a.set("axes", axes).set("keepdim", keepdim);
  return kiln::plugin::call1(op, {t}, a);
}

}  // namespace

void define_rms_norm(kiln::plugin::Registry& reg) {
  reg.op("rms_norm")
      .inputs({"x", "weight"})
      .outputs({"y"})
      .attrs({"eps:float=1e-6"})
      .category("normalization")
      .infer([](kiln::plugin::InferContext& c) {
        const auto& x = c.input(0);
        const auto& w = c.input(1);
        if (x.dtype != DType::Float32 && x.dtype != DType::Float64)
          throw kiln::plugin::Error("rms_norm takes float32 or float64 x");
        if (x.shape.empty()) throw kiln::plugin::Error("rms_norm needs x with at least one axis");
        if (w.shape.size() != 1 || w.shape[0] != x.shape.back() || w.dtype != x.dtype)
          throw kiln::plugin::Error("rms_norm's weight must be a vector of x's last size (" +
                                    std::to_string(x.shape.back()) + ") and x's dtype");
        if (!(c.attrs().get_float("eps") > 0)) throw kiln::plugin::Error("rms_norm's eps must be positive");
        c.set_output(0, x);
      })
      .grad([](kiln::plugin::GradContext& g) {
        // n = x * r with r = 1/sqrt(mean(x^2) + eps); y = n * w.
        Tensor x = g.input(0), w = g.input(1), dy = g.output_grad(0);
        const int64_t last = x.dim() - 1;
        Tensor eps = kiln::plugin::full({}, g.attrs().get_float("eps"), x.dtype());
        Tensor r = kiln::plugin::call1("rsqrt", {reduce("mean", x * x, {last}, true) + eps});
        Tensor n = x * r;
        Tensor dn = dy * w;
        if (g.needs_grad(0)) g.set_input_grad(0, r * (dn - n * reduce("mean", dn * n, {last}, true)));
        if (g.needs_grad(1)) {
          std::vector<int64_t> lead;
          for (int64_t a = 0; a < last; ++a) lead.push_back(a);
          g.set_input_grad(1, lead.empty() ? dy * n : reduce("sum", dy * n, lead, false));
        }
      })
      .kernel("cpu", DType::Float32, rms_norm_kernel<float>)
      .kernel("cpu", DType::Float64, rms_norm_kernel<double>)
#ifdef CUSTOM_OPS_CUDA
      .kernel("cuda", DType::Float32, rms_norm_cuda<float>)
      .kernel("cuda", DType::Float64, rms_norm_cuda<double>)
#endif
      .onnx("com.kiln.custom", "RmsNorm", 1);
}

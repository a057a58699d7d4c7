// CPU kernels of the fused losses.
#include <cmath>

#include "backends/cpu/kernel_helpers.h"
#include "ops/op_helpers.h"

namespace kiln::cpu {
namespace {

struct ClassLossArgs {
  int64_t n, c, ignore;
  double smoothing;
  std::string reduction;
};

ClassLossArgs class_args(const Tensor& x, const Attrs& a) {
  return {x.shape()[0], x.shape()[1], a.get_int("ignore_index", -100), a.get_float("label_smoothing", 0.0),
          detail::reduction_attr(a)};
}

template <typename T>
void cross_entropy_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = in[0].contiguous();
  auto t = in[1].to(DType::Int64).to_vector<int64_t>();
  Tensor wk = in.size() > 2 && in[2].defined() ? in[2].contiguous() : Tensor();
  const T* w = wk.defined() ? wk.data<T>() : nullptr;
  ClassLossArgs p = class_args(x, a);
  const T* px = x.data<T>();
  std::vector<double> loss(p.n, 0.0);
  double denom = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    if (t[i] == p.ignore) continue;
    KILN_CHECK(t[i] >= 0 && t[i] < p.c, "target ", t[i], " at position ", i, " is not a class index in [0, ", p.c,
               ") nor ignore_index (", p.ignore, ")");
    const T* row = px + i * p.c;
    double m = row[0];
    for (int64_t k = 1; k < p.c; ++k) m = std::max(m, static_cast<double>(row[k]));
    double s = 0;
    for (int64_t k = 0; k < p.c; ++k) s += std::exp(row[k] - m);
    double lse = m + std::log(s);
    double wt = w ? w[t[i]] : 1.0;
    double l = -(1 - p.smoothing) * wt * (row[t[i]] - lse);
    if (p.smoothing > 0) {
      double acc = 0;
      for (int64_t k = 0; k < p.c; ++k) acc += (w ? w[k] : 1.0) * (row[k] - lse);
      l -= p.smoothing / static_cast<double>(p.c) * acc;
    }
    loss[i] = l;
    denom += wt;
  }
  T* py = out[0].data<T>();
  if (p.reduction == "none") {
    for (int64_t i = 0; i < p.n; ++i) py[i] = static_cast<T>(loss[i]);
    return;
  }
  double total = 0;
  for (double l : loss) total += l;
  py[0] = static_cast<T>(p.reduction == "sum" ? total : total / denom);
}

template <typename T>
void cross_entropy_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor g = in[0].contiguous(), x = in[1].contiguous();
  auto t = in[2].to(DType::Int64).to_vector<int64_t>();
  Tensor wk = in.size() > 3 && in[3].defined() ? in[3].contiguous() : Tensor();
  const T* w = wk.defined() ? wk.data<T>() : nullptr;
  ClassLossArgs p = class_args(x, a);
  const T* px = x.data<T>();
  const T* pg = g.data<T>();
  T* po = out[0].data<T>();
  double denom = 0;
  for (int64_t i = 0; i < p.n; ++i)
    if (t[i] != p.ignore) denom += w ? w[t[i]] : 1.0;
  std::vector<double> prob(p.c), coeff(p.c);
  for (int64_t i = 0; i < p.n; ++i) {
    T* orow = po + i * p.c;
    if (t[i] == p.ignore) {
      std::fill(orow, orow + p.c, T(0));
      continue;
    }
    double scale = p.reduction == "none" ? pg[i] : (p.reduction == "sum" ? pg[0] : pg[0] / denom);
    const T* row = px + i * p.c;
    double m = row[0];
    for (int64_t k = 1; k < p.c; ++k) m = std::max(m, static_cast<double>(row[k]));
    double s = 0;
    for (int64_t k = 0; k < p.c; ++k) s += (prob[k] = std::exp(row[k] - m));
    double total_coeff = 0;
    for (int64_t k = 0; k < p.c; ++k) {
      coeff[k] = p.smoothing / static_cast<double>(p.c) * (w ? w[k] : 1.0);
      if (k == t[i]) coeff[k] += (1 - p.smoothing) * (w ? w[k] : 1.0);
      total_coeff += coeff[k];
    }
    for (int64_t k = 0; k < p.c; ++k) orow[k] = static_cast<T>(scale * (total_coeff * prob[k] / s - coeff[k]));
  }
}

template <typename T>
void nll_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = in[0].contiguous();
  auto t = in[1].to(DType::Int64).to_vector<int64_t>();
  Tensor wk = in.size() > 2 && in[2].defined() ? in[2].contiguous() : Tensor();
  const T* w = wk.defined() ? wk.data<T>() : nullptr;
  ClassLossArgs p = class_args(x, a);
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  double total = 0, denom = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    double l = 0;
    if (t[i] != p.ignore) {
      KILN_CHECK(t[i] >= 0 && t[i] < p.c, "target ", t[i], " at position ", i, " is not a class index in [0, ", p.c, ")");
      double wt = w ? w[t[i]] : 1.0;
      l = -wt * px[i * p.c + t[i]];
      denom += wt;
    }
    if (p.reduction == "none") py[i] = static_cast<T>(l);
    total += l;
  }
  if (p.reduction != "none") py[0] = static_cast<T>(p.reduction == "sum" ? total : total / denom);
}

template <typename T, typename F>
void pointwise_loss(const Ins& in, Outs& out, const Attrs& a, F f) {
  Tensor x = in[0].contiguous(), y = in[1].contiguous();
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* po = out[0].data<T>();
  const std::string& red = detail::reduction_attr(a);
  int64_t n = x.numel();
  if (red == "none") {
    for (int64_t i = 0; i < n; ++i) po[i] = static_cast<T>(f(px[i], py[i]));
    return;
  }
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += f(px[i], py[i]);
  po[0] = static_cast<T>(red == "sum" ? total : total / static_cast<double>(n));
}

template <typename T>
void mse_kernel(const Ins& in, Outs& out, const Attrs& a) {
  pointwise_loss<T>(in, out, a, [](double x, double y) { return (x - y) * (x - y); });
}
template <typename T>
void l1_kernel(const Ins& in, Outs& out, const Attrs& a) {
  pointwise_loss<T>(in, out, a, [](double x, double y) { return std::fabs(x - y); });
}
template <typename T>
void smooth_l1_kernel(const Ins& in, Outs& out, const Attrs& a) {
  double beta = a.get_float("beta", 1.0);
  pointwise_loss<T>(in, out, a, [beta](double x, double y) {
    double d = std::fabs(x - y);
    return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
  });
}
template <typename T>
void bce_kernel(const Ins& in, Outs& out, const Attrs& a) {
  pointwise_loss<T>(in, out, a, [](double x, double y) { return std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::fabs(x))); });
}

}  // namespace

KILN_CPU_F32_F64("cross_entropy", cross_entropy_kernel);
KILN_CPU_F32_F64("cross_entropy_backward", cross_entropy_backward_kernel);
KILN_CPU_F32_F64("nll_loss", nll_kernel);
KILN_CPU_F32_F64("mse_loss", mse_kernel);
KILN_CPU_F32_F64("l1_loss", l1_kernel);
KILN_CPU_F32_F64("smooth_l1_loss", smooth_l1_kernel);
KILN_CPU_F32_F64("binary_cross_entropy_with_logits", bce_kernel);

}  // namespace kiln::cpu

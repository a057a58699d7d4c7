// CPU kernels of the fused losses.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/softmax_row.h"
#include "ops/shape_rules.h"

namespace kiln::cpu {
namespace {

// The inputs of a class-index loss: contiguous input [n, c], int64 targets,
// optional class weights, and the attributes.
// Writes per-item losses, their sum, or their sum / denominator.
template <typename T>
void write_reduced(Tensor& out, const std::vector<double>& loss, const std::string& reduction, double denominator) {
  T* py = out.data<T>();
  if (reduction == "none") {
    for (size_t i = 0; i < loss.size(); ++i) py[i] = static_cast<T>(loss[i]);
    return;
  }
  double total = 0;
  for (double l : loss) total += l;
  py[0] = static_cast<T>(reduction == "sum" ? total : total / denominator);
}

template <typename T>
struct ClassLoss {
  Tensor x, weight_keep;
  std::vector<int64_t> target;
  const T* w = nullptr;
  int64_t n, c, ignore;
  double smoothing;
  std::string reduction;

  ClassLoss(const Ins& in, size_t input, const Attrs& a)
      : x(contiguous(in[input])), target(in[input + 1].to_vector<int64_t>()) {
    if (in.size() > input + 2 && in[input + 2].defined()) {
      weight_keep = contiguous(in[input + 2]);
      w = weight_keep.template data<T>();
    }
    n = x.shape()[0];
    c = x.shape()[1];
    ignore = a.get_int("ignore_index", -100);
    smoothing = a.get_float("label_smoothing", 0.0);
    reduction = detail::reduction_attr(a);
  }
  double weight(int64_t k) const { return w ? static_cast<double>(w[k]) : 1.0; }
  // The target of row i, or -1 when it is ignored; throws on a bad class index.
  int64_t target_of(int64_t i) const {
    int64_t t = target[i];
    if (t == ignore) return -1;
    KILN_CHECK(t >= 0 && t < c, "target ", t, " at position ", i, " is not a class index in [0, ", c,
               ") nor ignore_index (", ignore, ")");
    return t;
  }
  double denominator() const {
    double d = 0;
    for (int64_t i = 0; i < n; ++i)
      if (target_of(i) >= 0) d += weight(target[i]);
    return d;
  }
};

// log(sum(exp(row))) over c values, from the row's maximum (exp_sum_row:
// vectorized for float), the exponentials going to `scratch`.
template <typename T>
double row_logsumexp(const T* row, int64_t c, T* scratch) {
  compute_t<T> m;
  const compute_t<T> s = exp_sum_row(row, scratch, c, &m);
  return static_cast<double>(m) + std::log(static_cast<double>(s));
}

// Rows per task: enough values to be worth a thread.
int64_t row_grain(int64_t c) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(c, 1)); }

template <typename T>
void cross_entropy_kernel(const Ins& in, Outs& out, const Attrs& a) {
  ClassLoss<T> p(in, 0, a);
  const double denominator = p.denominator();  // (checks every target, before the threads start)
  const T* px = p.x.template data<T>();
  std::vector<double> loss(p.n, 0.0);
  parallel_for(p.n, row_grain(p.c), [&](int64_t lo, int64_t hi) {
    std::vector<T> scratch(static_cast<size_t>(p.c));
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t t = p.target[i];
      if (t == p.ignore) continue;
      const T* row = px + i * p.c;
      const double lse = row_logsumexp(row, p.c, scratch.data());
      double l = -(1 - p.smoothing) * p.weight(t) * (row[t] - lse);
      if (p.smoothing > 0) {
        double acc = 0;
        for (int64_t k = 0; k < p.c; ++k) acc += p.weight(k) * (row[k] - lse);
        l -= p.smoothing / static_cast<double>(p.c) * acc;
      }
      loss[i] = l;
    }
  });
  write_reduced<T>(out[0], loss, p.reduction, denominator);
}

template <typename T>
void cross_entropy_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor g = contiguous(in[0]);
  ClassLoss<T> p(in, 1, a);
  const double denom = p.denominator();  // (checks every target, before the threads start)
  const T* px = p.x.template data<T>();
  const T* pg = g.data<T>();
  T* po = out[0].data<T>();
  parallel_for(p.n, row_grain(p.c), [&](int64_t lo, int64_t hi) {
    std::vector<double> coeff(static_cast<size_t>(p.smoothing > 0 ? p.c : 0));
    for (int64_t i = lo; i < hi; ++i) {
      T* orow = po + i * p.c;
      const int64_t t = p.target[i];
      if (t == p.ignore) {
        std::fill(orow, orow + p.c, T(0));
        continue;
      }
      const double scale = p.reduction == "none" ? pg[i] : (p.reduction == "sum" ? pg[0] : pg[0] / denom);
      const T* row = px + i * p.c;
      if (p.smoothing == 0) {  // weight_t * scale * (softmax - one_hot(t)), from the exponentials in place
        compute_t<T> m;
        const double s = exp_sum_row(row, orow, p.c, &m);
        const auto k = static_cast<compute_t<T>>(scale * p.weight(t) / s);
        for (int64_t j = 0; j < p.c; ++j) orow[j] = static_cast<T>(static_cast<compute_t<T>>(orow[j]) * k);
        orow[t] = static_cast<T>(static_cast<double>(orow[t]) - scale * p.weight(t));
        continue;
      }
      const double lse = row_logsumexp(row, p.c, orow);
      // d loss / d x_k = sum_j coeff_j (softmax_k - [j == k]).
      double total_coeff = 0;
      for (int64_t k = 0; k < p.c; ++k) {
        coeff[k] = p.smoothing / static_cast<double>(p.c) * p.weight(k) + (k == t ? (1 - p.smoothing) * p.weight(k) : 0.0);
        total_coeff += coeff[k];
      }
      for (int64_t k = 0; k < p.c; ++k) orow[k] = static_cast<T>(scale * (total_coeff * std::exp(row[k] - lse) - coeff[k]));
    }
  });
}

template <typename T>
void nll_kernel(const Ins& in, Outs& out, const Attrs& a) {
  ClassLoss<T> p(in, 0, a);
  const T* px = p.x.template data<T>();
  std::vector<double> loss(p.n, 0.0);
  for (int64_t i = 0; i < p.n; ++i) {
    int64_t t = p.target_of(i);
    if (t >= 0) loss[i] = -p.weight(t) * px[i * p.c + t];
  }
  write_reduced<T>(out[0], loss, p.reduction, p.denominator());
}

template <typename T, typename F>
void pointwise_loss(const Ins& in, Outs& out, const Attrs& a, F f) {
  Tensor x = contiguous(in[0]), y = contiguous(in[1]);
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

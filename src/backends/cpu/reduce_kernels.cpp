// CPU reduction kernels. The input is brought into an [outer, R, inner]
// layout (R = reduced elements): a view when the reduced axes form one block
// of a contiguous tensor, otherwise a permuted copy with R innermost.
#include <cmath>
#include <limits>

#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/softmax_row.h"
#include "backends/cpu/vec8.h"
#include "core/finite_scan.h"
#include "ops/shape_rules.h"

namespace kiln::cpu {
namespace {

struct Layout {
  Tensor x;  // contiguous
  int64_t outer = 1, r = 1, inner = 1;
};

Layout make_layout(const Tensor& in, const std::vector<int64_t>& axes) {
  Layout l;
  const Shape& s = in.shape();
  int64_t rank = in.dim();
  bool block = !axes.empty();
  for (size_t i = 1; i < axes.size(); ++i) block = block && axes[i] == axes[i - 1] + 1;
  if (block && in.is_contiguous()) {
    l.x = in;
    for (int64_t d = 0; d < axes.front(); ++d) l.outer *= s[d];
    for (int64_t d : axes) l.r *= s[d];
    for (int64_t d = axes.back() + 1; d < rank; ++d) l.inner *= s[d];
    return l;
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      order.push_back(d);
      l.outer *= s[d];
    }
  for (int64_t d : axes) {
    order.push_back(d);
    l.r *= s[d];
  }
  l.x = contiguous(permuted(in, order));
  return l;
}

template <typename T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

// Sum-like reduction: out = finish(sum over R of map(x)).
template <typename T, typename Map, typename Finish>
void sum_reduce(const Layout& l, T* out, Map map, Finish finish) {
  using A = acc_t<T>;
  const T* x = l.x.data<T>();
  const int64_t R = l.r, I = l.inner;
  if (I == 1 && l.outer < get_num_threads() && R >= kGrainElements) {
    // Few long rows (a full reduction): split each row across threads.
    for (int64_t o = 0; o < l.outer; ++o) {
      const T* p = x + o * R;
      int threads = get_num_threads();
      std::vector<A> partial(static_cast<size_t>(threads), A(0));
      parallel_for(threads, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          int64_t b = R * t / threads, e = R * (t + 1) / threads;
          A lanes[8] = {};
          int64_t i = b;
          for (; i + 8 <= e; i += 8)
            for (int k = 0; k < 8; ++k) lanes[k] += static_cast<A>(map(static_cast<compute_t<T>>(p[i + k])));
          A acc = 0;
          for (; i < e; ++i) acc += static_cast<A>(map(static_cast<compute_t<T>>(p[i])));
          for (int k = 0; k < 8; ++k) acc += lanes[k];
          partial[t] = acc;
        }
      });
      A acc = 0;
      for (A v : partial) acc += v;
      out[o] = static_cast<T>(finish(acc));
    }
    return;
  }
  if (I == 1) {
    parallel_for(l.outer, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* p = x + o * R;
        A lanes[8] = {};
        int64_t i = 0;
        for (; i + 8 <= R; i += 8)
          for (int k = 0; k < 8; ++k) lanes[k] += static_cast<A>(map(static_cast<compute_t<T>>(p[i + k])));
        A acc = 0;
        for (; i < R; ++i) acc += static_cast<A>(map(static_cast<compute_t<T>>(p[i])));
        for (int k = 0; k < 8; ++k) acc += lanes[k];
        out[o] = static_cast<T>(finish(acc));
      }
    });
    return;
  }
  parallel_for(l.outer * I, std::max<int64_t>(64, kGrainElements / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    // Work on runs of the inner axis so the R loop streams through memory.
    std::vector<A> acc;
    for (int64_t start = b; start < e;) {
      int64_t o = start / I, j0 = start % I;
      int64_t j1 = std::min(I, j0 + (e - start));
      acc.assign(static_cast<size_t>(j1 - j0), A(0));
      for (int64_t r = 0; r < R; ++r) {
        const T* p = x + (o * R + r) * I;
        for (int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<A>(map(static_cast<compute_t<T>>(p[j])));
      }
      for (int64_t j = j0; j < j1; ++j) out[o * I + j] = static_cast<T>(finish(acc[j - j0]));
      start += j1 - j0;
    }
  });
}

// Generic reduction with combine(acc, v) over R, serial per output element.
template <typename T, typename Init, typename Combine, typename Finish>
void fold_reduce(const Layout& l, T* out, Init init, Combine combine, Finish finish) {
  const T* x = l.x.data<T>();
  const int64_t R = l.r, I = l.inner;
  parallel_for(l.outer * I, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / I, j = k % I;
      auto acc = init();
      for (int64_t r = 0; r < R; ++r) acc = combine(acc, static_cast<compute_t<T>>(x[(o * R + r) * I + j]));
      out[k] = static_cast<T>(finish(acc));
    }
  });
}

std::vector<int64_t> axes_attr(const Tensor& x, const Attrs& a) {
  return detail::normalize_axes(a.get_ints("axes", {}), x.dim());
}

// Reductions that keep a middle block of axes of a contiguous tensor, [A, K, B]
// reduced over A and B (a per-channel sum of NCHW over N, H and W): summed in
// place, where the general path would first copy a permuted tensor. Returns
// false when the axes have another shape.
template <typename T>
bool sum_around(const Tensor& x, const std::vector<int64_t>& axes, T* out, double divisor) {
  const int64_t rank = x.dim();
  if (!x.is_contiguous() || axes.empty() || axes.front() != 0 || axes.back() != rank - 1) return false;
  int64_t k0 = -1, k1 = -1;  // the kept block [k0, k1)
  for (size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) {
      if (k0 >= 0) return false;  // more than one kept block
      k0 = axes[i - 1] + 1;
      k1 = axes[i];
    }
  if (k0 < 0) return false;
  const Shape& s = x.shape();
  int64_t A = 1, K = 1, B = 1;
  for (int64_t d = 0; d < k0; ++d) A *= s[d];
  for (int64_t d = k0; d < k1; ++d) K *= s[d];
  for (int64_t d = k1; d < rank; ++d) B *= s[d];
  using Acc = acc_t<T>;
  const T* p = x.data<T>();
  parallel_for(K, 1, [&](int64_t kb, int64_t ke) {
    for (int64_t k = kb; k < ke; ++k) {
      Acc lanes[8] = {};
      Acc acc = 0;
      for (int64_t a = 0; a < A; ++a) {
        const T* row = p + (a * K + k) * B;
        int64_t i = 0;
        for (; i + 8 <= B; i += 8)
          for (int l = 0; l < 8; ++l) lanes[l] += static_cast<Acc>(static_cast<compute_t<T>>(row[i + l]));
        for (; i < B; ++i) acc += static_cast<Acc>(static_cast<compute_t<T>>(row[i]));
      }
      for (int l = 0; l < 8; ++l) acc += lanes[l];
      out[k] = divisor == 1.0 ? static_cast<T>(acc) : static_cast<T>(static_cast<double>(acc) / divisor);
    }
  });
  return true;
}

template <typename T>
void sum_kernel(const Ins& in, Outs& out, const Attrs& a) {
  auto axes = axes_attr(in[0], a);
  if (sum_around<T>(in[0], axes, out[0].data<T>(), 1.0)) return;
  sum_reduce<T>(make_layout(in[0], axes), out[0].data<T>(), [](auto v) { return v; },
                [](auto acc) { return acc; });
}

template <typename T>
void mean_kernel(const Ins& in, Outs& out, const Attrs& a) {
  auto axes = axes_attr(in[0], a);
  int64_t count = 1;
  for (int64_t d : axes) count *= in[0].shape()[d];
  if (count > 0 && sum_around<T>(in[0], axes, out[0].data<T>(), static_cast<double>(count))) return;
  Layout l = make_layout(in[0], axes);
  double n = static_cast<double>(l.r);
  sum_reduce<T>(l, out[0].data<T>(), [](auto v) { return v; }, [n](auto acc) { return static_cast<double>(acc) / n; });
}

// The largest (kMax) or smallest float of p[0, n), the first NaN where
// there is one, eight lanes at a time with vec8's NaN-keeping choice.
template <bool kMax>
float float_extreme(const float* p, int64_t n) {
  using namespace vec8;
  constexpr float start = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  vf best = splat(start);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const vf v = load(p + i);
    best = select(kMax ? beats(v, best) : beats(-v, -best), v, best);
  }
  float r = start;
  auto take = [&](float v) {
    if (r != r) return;
    if (v != v || (kMax ? v > r : v < r)) r = v;
  };
  for (int k = 0; k < 8; ++k) take(best[k]);
  for (; i < n; ++i) take(p[i]);
  return r;
}

template <typename T, bool kMax>
void extreme_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Layout l = make_layout(in[0], axes_attr(in[0], a));
  KILN_CHECK(l.r > 0 || l.outer * l.inner == 0, kMax ? "amax" : "amin",
             " of an empty axis has no identity; reduce a non-empty tensor");
  if constexpr (std::is_same_v<T, float>) {
    // Few long float rows (a whole tensor's extreme, as dynamic
    // quantization takes): each row split across the threads, vectorized.
    if (l.inner == 1 && l.r >= kGrainElements && l.outer < get_num_threads()) {
      const float* x = l.x.data<float>();
      for (int64_t o = 0; o < l.outer; ++o) {
        const int parts = get_num_threads();
        std::vector<float> partial(static_cast<size_t>(parts));
        parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t)
            partial[t] = float_extreme<kMax>(x + o * l.r + l.r * t / parts, l.r * (t + 1) / parts - l.r * t / parts);
        });
        out[0].data<float>()[o] = float_extreme<kMax>(partial.data(), parts);
      }
      return;
    }
  }
  using C = compute_t<T>;
  fold_reduce<T>(
      l, out[0].data<T>(),
      // Floats start from -inf / +inf, so a row of -inf (a fully masked row) has max -inf, not lowest().
      [] {
        if constexpr (std::numeric_limits<C>::has_infinity)
          return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
        return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
      },
      [](C acc, C v) {
        if (v != v) return v;  // NaN propagates
        if (acc != acc) return acc;
        return kMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
      },
      [](C acc) { return acc; });
}
template <typename T>
void amax_kernel(const Ins& in, Outs& out, const Attrs& a) { extreme_kernel<T, true>(in, out, a); }
template <typename T>
void amin_kernel(const Ins& in, Outs& out, const Attrs& a) { extreme_kernel<T, false>(in, out, a); }

template <typename T>
void prod_kernel(const Ins& in, Outs& out, const Attrs& a) {
  using A = acc_t<T>;
  fold_reduce<T>(make_layout(in[0], axes_attr(in[0], a)), out[0].data<T>(), [] { return A(1); },
                 [](A acc, compute_t<T> v) { return acc * static_cast<A>(v); }, [](A acc) { return acc; });
}

template <typename T>
void logsumexp_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Layout l = make_layout(in[0], axes_attr(in[0], a));
  const T* x = l.x.data<T>();
  T* y = out[0].data<T>();
  const int64_t R = l.r, I = l.inner;
  parallel_for(l.outer * I, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / I, j = k % I;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t r = 0; r < R; ++r) m = std::max(m, static_cast<double>(static_cast<compute_t<T>>(x[(o * R + r) * I + j])));
      double s = 0;
      if (std::isfinite(m))
        for (int64_t r = 0; r < R; ++r) s += std::exp(static_cast<double>(static_cast<compute_t<T>>(x[(o * R + r) * I + j])) - m);
      y[k] = static_cast<T>(std::isfinite(m) ? m + std::log(s) : m);
    }
  });
}

template <typename T, bool kStd>
void moment_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Layout l = make_layout(in[0], axes_attr(in[0], a));
  const T* x = l.x.data<T>();
  T* y = out[0].data<T>();
  const int64_t R = l.r, I = l.inner;
  double denom = static_cast<double>(R - a.get_int("correction", 1));
  parallel_for(l.outer * I, 16, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / I, j = k % I;
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += static_cast<double>(static_cast<compute_t<T>>(x[(o * R + r) * I + j]));
      double m = s / static_cast<double>(R);
      double ss = 0;
      for (int64_t r = 0; r < R; ++r) {
        double d = static_cast<double>(static_cast<compute_t<T>>(x[(o * R + r) * I + j])) - m;
        ss += d * d;
      }
      double v = denom > 0 ? ss / denom : std::numeric_limits<double>::quiet_NaN();
      y[k] = static_cast<T>(kStd ? std::sqrt(v) : v);
    }
  });
}
template <typename T>
void var_kernel(const Ins& in, Outs& out, const Attrs& a) { moment_kernel<T, false>(in, out, a); }
template <typename T>
void std_kernel(const Ins& in, Outs& out, const Attrs& a) { moment_kernel<T, true>(in, out, a); }

template <typename T, bool kMax>
void arg_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& xin = in[0];
  int64_t ax = normalize_axis(a.get_int("axis"), xin.dim());
  Layout l = make_layout(xin, xin.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{ax});
  if (xin.dim() == 0) l.r = 1;
  const T* x = l.x.data<T>();
  int64_t* y = out[0].data<int64_t>();
  const int64_t R = l.r, I = l.inner;
  parallel_for(l.outer * I, 64, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / I, j = k % I;
      int64_t best = 0;
      auto bv = static_cast<compute_t<T>>(x[o * R * I + j]);
      for (int64_t r = 1; r < R; ++r) {
        auto v = static_cast<compute_t<T>>(x[(o * R + r) * I + j]);
        if (bv != bv) break;  // the first NaN wins, as in PyTorch
        if (v != v || (kMax ? v > bv : v < bv)) {
          bv = v;
          best = r;
        }
      }
      y[k] = best;
    }
  });
}
template <typename T>
void argmax_kernel(const Ins& in, Outs& out, const Attrs& a) { arg_kernel<T, true>(in, out, a); }
template <typename T>
void argmin_kernel(const Ins& in, Outs& out, const Attrs& a) { arg_kernel<T, false>(in, out, a); }

template <typename T, bool kLog>
void softmax_strided(const T* px, T* py, int64_t n, int64_t stride) {
  using C = compute_t<T>;
  C m = -std::numeric_limits<C>::infinity();
  for (int64_t r = 0; r < n; ++r) m = std::max(m, static_cast<C>(px[r * stride]));
  C s = 0;
  for (int64_t r = 0; r < n; ++r) {
    C ev = std::exp(static_cast<C>(px[r * stride]) - m);
    s += ev;
    if (!kLog) py[r * stride] = static_cast<T>(ev);
  }
  if (kLog) {
    C lse = m + std::log(s);
    for (int64_t r = 0; r < n; ++r) py[r * stride] = static_cast<T>(static_cast<C>(px[r * stride]) - lse);
  } else {
    C inv = C(1) / s;
    for (int64_t r = 0; r < n; ++r) py[r * stride] = static_cast<T>(static_cast<C>(py[r * stride]) * inv);
  }
}

template <typename T, bool kLog>
void softmax_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& xin = in[0];
  if (xin.numel() == 0) return;
  int64_t ax = normalize_axis(a.get_int("axis", -1), xin.dim());
  Layout l = make_layout(xin, xin.dim() == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{ax});
  const T* x = l.x.data<T>();
  // The output has the input's shape: write in layout order, then permute back if needed.
  Tensor tmp = l.x.same(xin) ? out[0] : Tensor::empty(l.x.shape(), xin.dtype());
  T* y = tmp.data<T>();
  const int64_t R = xin.dim() == 0 ? 1 : l.r, I = l.inner;
  parallel_for(l.outer * I, std::max<int64_t>(1, 4096 / std::max<int64_t>(R, 1)), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t o = k / I, j = k % I;
      if (I == 1) {
        softmax_row<T, kLog>(x + o * R, y + o * R, R);
      } else {
        softmax_strided<T, kLog>(x + o * R * I + j, y + o * R * I + j, R, I);
      }
    }
  });
  if (!tmp.same(out[0])) {
    // tmp is [non-axis dims..., axis]; move the axis back to where it was.
    std::vector<int64_t> order;
    int64_t rank = xin.dim();
    for (int64_t d = 0; d < rank; ++d) order.push_back(d < ax ? d : (d == ax ? rank - 1 : d - 1));
    strided_copy(permuted(tmp, order), out[0]);
  }
}
template <typename T>
void softmax_k(const Ins& in, Outs& out, const Attrs& a) { softmax_kernel<T, false>(in, out, a); }
template <typename T>
void log_softmax_k(const Ins& in, Outs& out, const Attrs& a) { softmax_kernel<T, true>(in, out, a); }

}  // namespace

KILN_CPU_FLOAT("sum", sum_kernel);
KILN_CPU_INT("sum", sum_kernel);
KILN_CPU_FLOAT("mean", mean_kernel);
KILN_CPU_NUMERIC("amax", amax_kernel);
KILN_CPU_NUMERIC("amin", amin_kernel);
KILN_CPU_FLOAT("prod", prod_kernel);
KILN_CPU_INT("prod", prod_kernel);
KILN_CPU_FLOAT("logsumexp", logsumexp_kernel);
KILN_CPU_FLOAT("var", var_kernel);
KILN_CPU_FLOAT("std", std_kernel);
KILN_CPU_NUMERIC("argmax", argmax_kernel);
KILN_CPU_NUMERIC("argmin", argmin_kernel);
KILN_CPU_FLOAT("softmax", softmax_k);
KILN_CPU_FLOAT("log_softmax", log_softmax_k);

namespace {
// Each input in its own dtype (gradients of several precisions may come together).
void all_finite_kernel(const Ins& in, Outs& out, const Attrs&) {
  bool finite = true;
  for (size_t i = 0; i < in.size() && finite; ++i) {
    const Tensor x = contiguous(in[i]);
    const int64_t n = x.numel();
    switch (x.dtype()) {
      case DType::Float32: finite = detail::first_non_finite_f32(x.data<float>(), n) < 0; break;
      case DType::Float64: finite = detail::first_non_finite_f64(x.data<double>(), n) < 0; break;
      case DType::Float16:
        finite = !detail::any_non_finite_16(static_cast<const uint16_t*>(x.raw_data()), n, 0x7c00);
        break;
      case DType::BFloat16:
        finite = !detail::any_non_finite_16(static_cast<const uint16_t*>(x.raw_data()), n, 0x7f80);
        break;
      default: break;  // integers are always finite
    }
  }
  *out[0].data<bool>() = finite;
}
}  // namespace
KILN_REGISTER_KERNEL("all_finite", CPU, all_finite_kernel, DType::Float32, DType::Float64, DType::Float16,
                     DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8, DType::Bool, DType::Int8);

}  // namespace kiln::cpu

// CPU kernels of batch/layer/group normalization and dropout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/norm_rows.h"
#include "backends/cpu/vec8.h"
#include "core/philox.h"
#include "kiln/generator.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

// Sum of p[0..n) and sum of (p[k] - shift)^2, in double with eight lanes so
// the loops vectorize (a single accumulator would serialize on add latency).
template <typename T>
void lane_sums(const T* p, int64_t n, double shift, double& sum, double& sq) {
  double s[8] = {}, q[8] = {};
  int64_t k = 0;
  if constexpr (std::is_same_v<T, float>) {
    // As 8-double values (the same sums, lane by lane): written as arrays,
    // the loop ran 60% slower when GCC prefers 512-bit vectors.
    // Two pairs of sums, the second taking every other 8 values, then added
    // lane by lane: one pair waited on the add's latency every 8 values (a
    // 256-wide layer norm's rows took 0.34 ns a value).
    using vd = double __attribute__((vector_size(64)));
    vd vs{}, vq{}, ws{}, wq{};
    const vd vshift = vd{} + shift;
    for (; k + 16 <= n; k += 16) {
      const vd v = __builtin_convertvector(vec8::load(p + k), vd);
      const vd w = __builtin_convertvector(vec8::load(p + k + 8), vd);
      vs += v;
      vq += (v - vshift) * (v - vshift);
      ws += w;
      wq += (w - vshift) * (w - vshift);
    }
    if (k + 8 <= n) {
      const vd v = __builtin_convertvector(vec8::load(p + k), vd);
      vs += v;
      vq += (v - vshift) * (v - vshift);
      k += 8;
    }
    vs += ws;
    vq += wq;
    std::memcpy(s, &vs, sizeof s);
    std::memcpy(q, &vq, sizeof q);
  }
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) {
      double v = static_cast<double>(p[k + j]);
      s[j] += v;
      q[j] += (v - shift) * (v - shift);
    }
  for (; k < n; ++k) {
    double v = static_cast<double>(p[k]);
    s[0] += v;
    q[0] += (v - shift) * (v - shift);
  }
  // (Into locals first: sum and sq may alias, so adding to them in the
  // loop stored each step.)
  double total = 0, squares = 0;
  for (int j = 0; j < 8; ++j) {
    total += s[j];
    squares += q[j];
  }
  sum += total;
  sq += squares;
}

template <typename T>
const T* opt_data(const Ins& in, size_t i, Tensor& keep) {
  if (in.size() <= i || !in[i].defined()) return nullptr;
  keep = contiguous(in[i]);
  return keep.data<T>();
}

template <typename T>
void batch_norm_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]), wk, bk, mk, vk;
  const T* w = opt_data<T>(in, 1, wk);
  const T* b = opt_data<T>(in, 2, bk);
  bool training = a.get_bool("training", true);
  double eps = a.get_float("eps", 1e-5), momentum = a.get_float("momentum", 0.1);
  int64_t n = x.shape()[0], c = x.shape()[1];
  int64_t inner = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  int64_t count = n * inner;
  KILN_CHECK(!training || count > 1, "training mode needs more than one value per channel (got input ",
             x.meta_str(), "); use a batch larger than 1 or eval mode");
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  T* pmean = out[1].data<T>();
  T* prstd = out[2].data<T>();
  const bool has_running = in.size() > 4 && in[3].defined() && in[4].defined();
  parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double mean, var;
      if (training) {
        // Shifted by the first value: the variance stays accurate when the mean is large.
        double shift = count > 0 ? static_cast<double>(px[ch * inner]) : 0.0, s = 0, shifted_sq = 0;
        for (int64_t i = 0; i < n; ++i) lane_sums(px + (i * c + ch) * inner, inner, shift, s, shifted_sq);
        mean = s / static_cast<double>(count);
        double ss = std::max(0.0, shifted_sq - static_cast<double>(count) * (mean - shift) * (mean - shift));
        var = ss / static_cast<double>(count);
        if (has_running) {
          T* rm = in[3].data<T>() + 0;
          T* rv = in[4].data<T>();
          int64_t rms = in[3].strides()[0], rvs = in[4].strides()[0];
          double unbiased = ss / static_cast<double>(count - 1);
          rm[ch * rms] = static_cast<T>((1 - momentum) * rm[ch * rms] + momentum * mean);
          rv[ch * rvs] = static_cast<T>((1 - momentum) * rv[ch * rvs] + momentum * unbiased);
        }
      } else {
        mean = in[3].data<T>()[ch * in[3].strides()[0]];
        var = in[4].data<T>()[ch * in[4].strides()[0]];
      }
      double rstd = 1.0 / std::sqrt(var + eps);
      pmean[ch] = static_cast<T>(mean);
      prstd[ch] = static_cast<T>(rstd);
      T scale = static_cast<T>(rstd * (w ? w[ch] : 1.0));
      T shift = static_cast<T>((b ? b[ch] : 0.0) - mean * rstd * (w ? w[ch] : 1.0));
      for (int64_t i = 0; i < n; ++i) {
        const T* p = px + (i * c + ch) * inner;
        T* q = py + (i * c + ch) * inner;
        for (int64_t k = 0; k < inner; ++k) q[k] = p[k] * scale + shift;
      }
    }
  });
  if (training && has_running) {
    in[3].impl().storage->version++;
    in[4].impl().storage->version++;
  }
}

template <typename T>
void batch_norm_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor g = contiguous(in[0]), x = contiguous(in[1]), wk;
  const T* w = opt_data<T>(in, 2, wk);
  Tensor mk = contiguous(in[3]), rk = contiguous(in[4]);
  const T* pm = mk.data<T>();
  const T* pr = rk.data<T>();
  bool training = a.get_bool("training", true);
  int64_t n = x.shape()[0], c = x.shape()[1];
  int64_t inner = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  double count = static_cast<double>(n * inner);
  const T* pg = g.data<T>();
  const T* px = x.data<T>();
  T* pgx = out[0].data<T>();
  T* pgw = out[1].data<T>();
  T* pgb = out[2].data<T>();
  parallel_for(c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      const double mean = pm[ch], rstd = pr[ch], scale = w ? static_cast<double>(w[ch]) : 1.0;
      double sg[8] = {}, sgx[8] = {};
      for (int64_t i = 0; i < n; ++i) {
        const T* gp = pg + (i * c + ch) * inner;
        const T* xp = px + (i * c + ch) * inner;
        int64_t k = 0;
        for (; k + 8 <= inner; k += 8)
          for (int j = 0; j < 8; ++j) {
            sg[j] += gp[k + j];
            sgx[j] += static_cast<double>(gp[k + j]) * (static_cast<double>(xp[k + j]) - mean);
          }
        for (; k < inner; ++k) {
          sg[0] += gp[k];
          sgx[0] += static_cast<double>(gp[k]) * (static_cast<double>(xp[k]) - mean);
        }
      }
      double sum_g = 0, sum_gx = 0;
      for (int j = 0; j < 8; ++j) {
        sum_g += sg[j];
        sum_gx += sgx[j];
      }
      pgb[ch] = static_cast<T>(sum_g);
      pgw[ch] = static_cast<T>(sum_gx * rstd);
      // gx = w rstd (g - mean(g) - xhat mean(g xhat)) in training; w rstd g in eval.
      const T k1 = static_cast<T>(scale * rstd);
      const T k2 = static_cast<T>(training ? sum_g / count : 0.0);
      const T k3 = static_cast<T>(training ? rstd * rstd * sum_gx / count : 0.0);
      const T m = static_cast<T>(mean);
      for (int64_t i = 0; i < n; ++i) {
        const T* gp = pg + (i * c + ch) * inner;
        const T* xp = px + (i * c + ch) * inner;
        T* op = pgx + (i * c + ch) * inner;
        for (int64_t k = 0; k < inner; ++k) op[k] = k1 * (gp[k] - k2 - (xp[k] - m) * k3);
      }
    }
  });
}

// The mean and 1 / standard deviation of one row of m values, summed in double.
template <typename T>
void row_moments(const T* p, int64_t m, double eps, double& mean, double& rstd) {
  double shift = m > 0 ? static_cast<double>(p[0]) : 0.0, s = 0, shifted_sq = 0;
  lane_sums(p, m, shift, s, shifted_sq);
  mean = s / static_cast<double>(m);
  double ss = std::max(0.0, shifted_sq - static_cast<double>(m) * (mean - shift) * (mean - shift));
  rstd = 1.0 / std::sqrt(ss / static_cast<double>(m) + eps);
}

// One layer-norm row: element k takes affine k. No index arithmetic per
// element, so the loop vectorizes; the general one in normalize_rows pays an
// integer division per element and ran 5x slower.
template <typename T>
void layer_norm_row_of(const T* p, T* q, int64_t m, double eps, const T* w, const T* b, T* pmean, T* prstd) {
  double mean, rstd;
  row_moments(p, m, eps, mean, rstd);
  if (pmean) *pmean = static_cast<T>(mean), *prstd = static_cast<T>(rstd);
  const T mu = static_cast<T>(mean), rs = static_cast<T>(rstd);
  for (int64_t k = 0; k < m; ++k) {
    T v = (p[k] - mu) * rs;
    if (w) v *= w[k];
    if (b) v += b[k];
    q[k] = v;
  }
}

// Normalizes `rows` rows of `m` elements; affine index = element % affine_period / affine_div.
template <typename T>
void normalize_rows(const T* px, T* py, T* pmean, T* prstd, int64_t rows, int64_t m, double eps, const T* w, const T* b,
                    int64_t affine_period, int64_t affine_div, int64_t row_offset_period) {
  parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* p = px + r * m;
      T* q = py + r * m;
      if (affine_div == 1 && affine_period == m) {
        layer_norm_row_of(p, q, m, eps, w, b, pmean + r, prstd + r);
        continue;
      }
      double mean, rstd;
      row_moments(p, m, eps, mean, rstd);
      pmean[r] = static_cast<T>(mean);
      prstd[r] = static_cast<T>(rstd);
      int64_t base = (r % row_offset_period) * m;
      for (int64_t k = 0; k < m; ++k) {
        T v = static_cast<T>((p[k] - mean) * rstd);
        if (w || b) {
          int64_t ai = ((base + k) % affine_period) / affine_div;
          if (w) v *= w[ai];
          if (b) v += b[ai];
        }
        q[k] = v;
      }
    }
  });
}

template <typename T>
void layer_norm_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]), wk, bk;
  const T* w = opt_data<T>(in, 1, wk);
  const T* b = opt_data<T>(in, 2, bk);
  int64_t k = a.get_int("normalized_ndim");
  int64_t m = 1;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) m *= x.shape()[i];
  int64_t rows = m == 0 ? 0 : x.numel() / m;
  normalize_rows<T>(x.data<T>(), out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), rows, m, a.get_float("eps", 1e-5),
                    w, b, std::max<int64_t>(m, 1), 1, 1);
}

// Sums over one row of m values of gh = g * w and gh * xhat, xhat = (x -
// mean) * rstd; 8 lanes at a time for float (a single accumulator is a
// serial chain that does not vectorize).
template <typename T>
void layer_norm_row_sums(const T* g, const T* x, const T* w, int64_t m, T mean, T rstd, T& s1, T& s2) {
  int64_t j = 0;
  s1 = s2 = T(0);
  if constexpr (std::is_same_v<T, float>) {
    vec8::vf a{}, b{};
    const vec8::vf mu = vec8::splat(mean), rs = vec8::splat(rstd);
    for (; j + 8 <= m; j += 8) {
      const vec8::vf gh = w ? vec8::load(g + j) * vec8::load(w + j) : vec8::load(g + j);
      a += gh;
      b += gh * ((vec8::load(x + j) - mu) * rs);
    }
    float la[8], lb[8];
    vec8::store(la, a);
    vec8::store(lb, b);
    for (int k = 0; k < 8; ++k) s1 += la[k], s2 += lb[k];
  }
  for (; j < m; ++j) {
    const T gh = w ? g[j] * w[j] : g[j];
    s1 += gh;
    s2 += gh * ((x[j] - mean) * rstd);
  }
}

// The gradient of layer_norm over rows of m values: per row, gx = rstd *
// (gh - mean(gh) - xhat * mean(gh * xhat)); gw = sum over rows of g * xhat and
// gb = sum of g, each thread summing its rows in double, the threads' sums
// added in order.
template <typename T>
void layer_norm_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor g = contiguous(in[0]), x = contiguous(in[1]), wk;
  const T* w = opt_data<T>(in, 2, wk);
  Tensor mk = contiguous(in[3]), rk = contiguous(in[4]);
  const int64_t k = a.get_int("normalized_ndim");
  int64_t m = 1;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) m *= x.shape()[i];
  const int64_t rows = m == 0 ? 0 : x.numel() / m;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), rows));
  std::vector<double> part_w(static_cast<size_t>(parts * m), 0.0), part_b(part_w.size(), 0.0);
  const T *pg = g.data<T>(), *px = x.data<T>(), *pm = mk.data<T>(), *pr = rk.data<T>();
  T* pgx = out[0].data<T>();
  parallel_for(parts, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      double* sw = part_w.data() + t * m;
      double* sb = part_b.data() + t * m;
      for (int64_t r = t * rows / parts; r < (t + 1) * rows / parts; ++r) {
        const T *gr = pg + r * m, *xr = px + r * m;
        const T mean = pm[r], rstd = pr[r];
        T s1, s2;
        layer_norm_row_sums(gr, xr, w, m, mean, rstd, s1, s2);
        const T k1 = s1 / static_cast<T>(m), k2 = s2 / static_cast<T>(m);
        T* o = pgx + r * m;
        for (int64_t j = 0; j < m; ++j) {
          const T xh = (xr[j] - mean) * rstd;
          const T gh = w ? gr[j] * w[j] : gr[j];
          o[j] = rstd * (gh - k1 - xh * k2);
          sw[j] += static_cast<double>(gr[j] * xh);
          sb[j] += static_cast<double>(gr[j]);
        }
      }
    }
  });
  T* pgw = out[1].data<T>();
  T* pgb = out[2].data<T>();
  for (int64_t j = 0; j < m; ++j) {
    double a_w = 0, a_b = 0;
    for (int64_t t = 0; t < parts; ++t) a_w += part_w[t * m + j], a_b += part_b[t * m + j];
    pgw[j] = static_cast<T>(a_w);
    pgb[j] = static_cast<T>(a_b);
  }
}

template <typename T>
void group_norm_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]), wk, bk;
  const T* w = opt_data<T>(in, 1, wk);
  const T* b = opt_data<T>(in, 2, bk);
  int64_t n = x.shape()[0], c = x.shape()[1], g = a.get_int("groups");
  int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
  int64_t m = (c / g) * spatial;
  // Row r is (sample, group); element k of it is channel (r % g) * (c/g) + k / spatial.
  normalize_rows<T>(x.data<T>(), out[0].data<T>(), out[1].data<T>(), out[2].data<T>(), n * g, m,
                    a.get_float("eps", 1e-5), w, b, std::max<int64_t>(c * spatial, 1), std::max<int64_t>(spatial, 1), g);
}

template <typename T>
void dropout_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]);
  const double p = a.get_float("p");
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  // Element i's fate is philox's number i of the draw: a seed fixes the
  // mask, on every backend, whatever the threads.
  Generator& g = default_generator();
  const uint64_t n = static_cast<uint64_t>(x.numel()), seed = g.initial_seed(), first = g.take(n);
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  T* pm = out[1].data<T>();
  parallel_for(x.numel(), 1 << 13, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      pm[i] = philox::keeps(seed, first, static_cast<uint64_t>(i), 1.0 - p) ? scale : T(0);
      py[i] = px[i] * pm[i];
    }
  });
}

}  // namespace

void layer_norm_row(const float* x, float* y, int64_t m, double eps, const float* w, const float* b) {
  layer_norm_row_of<float>(x, y, m, eps, w, b, nullptr, nullptr);
}

void rms_norm_row(const float* x, float* y, int64_t m, double eps, const float* w) {
  float lanes[16] = {};  // (one accumulator would be a serial chain)
  int64_t k = 0;
  for (; k + 16 <= m; k += 16)
    for (int l = 0; l < 16; ++l) lanes[l] += x[k + l] * x[k + l];
  float sum = 0.0f;
  for (float v : lanes) sum += v;
  for (; k < m; ++k) sum += x[k] * x[k];
  const float inverse = 1.0f / std::sqrt(sum / static_cast<float>(m) + static_cast<float>(eps));
  if (w)
    for (k = 0; k < m; ++k) y[k] = x[k] * inverse * w[k];
  else
    for (k = 0; k < m; ++k) y[k] = x[k] * inverse;
}

KILN_CPU_F32_F64("batch_norm", batch_norm_kernel);
KILN_CPU_F32_F64("batch_norm_backward", batch_norm_backward_kernel);
KILN_CPU_F32_F64("layer_norm_backward", layer_norm_backward_kernel);
KILN_CPU_F32_F64("layer_norm", layer_norm_kernel);
KILN_CPU_F32_F64("group_norm", group_norm_kernel);
KILN_CPU_F32_F64("dropout", dropout_kernel);

}  // namespace kiln::cpu

// CPU kernels of lstm, gru and rnn and their backward ops. Forward: the
// input projections of all steps in one GEMM, then per step the product of
// the hidden state with W_hh (at batch <= 4 split by hidden units over the
// threads) and the gate math; what backward needs (activated gates,
// cell states) goes into the reserve output. Backward walks the steps in
// reverse collecting the pre-activation gradients of every step, then takes
// the input and weight gradients in three GEMMs over all steps at once.
#include "backends/cpu/rnn_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_caches.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/packed_linear.h"
#include "backends/cpu/recurrent_panels.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

enum class Kind { Lstm, Gru, Rnn };

constexpr int64_t gates_of(Kind k) { return k == Kind::Lstm ? 4 : k == Kind::Gru ? 3 : 1; }
constexpr int64_t reserve_of(Kind k) { return k == Kind::Lstm ? 5 : k == Kind::Gru ? 4 : 0; }

template <typename T>
T sigmoid(T v) {
  return T(1) / (T(1) + std::exp(-v));
}

// float tanh through one exp: libm's tanhf goes through expm1f, which is
// several times slower; the absolute error stays within a few float ulps of 1.
template <typename T>
T fast_tanh(T v) {
  if constexpr (std::is_same_v<T, float>) {
    const float e = std::exp(-2.0f * std::abs(v));
    return std::copysign((1.0f - e) / (1.0f + e), v);
  } else {
    return std::tanh(v);
  }
}

// A state input [N, H] as a buffer (zeros when omitted).
template <typename T>
std::vector<T> state_of(const Tensor& t, int64_t size) {
  std::vector<T> v(size, T(0));
  if (t.defined()) {
    const Tensor c = contiguous(t);
    std::memcpy(v.data(), c.data<T>(), size * sizeof(T));
  }
  return v;
}

// Rows of the batch in parallel when a step has enough work.
void for_rows(int64_t rows, int64_t per_row, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(per_row, 1)), fn);
}

// The per-step products are small (a few rows by a few hundred): below
// kSmall multiply-adds a plain loop beats a library call's fixed cost.
constexpr int64_t kSmall = 1 << 16;

// C = A B + beta C, A [m, k], B [k, n].
template <typename T>
void step_gemm_nn(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                  int64_t ldc) {
  if (m * n * k > kSmall) return gemm<T>(false, false, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
  for (int64_t i = 0; i < m; ++i) {
    T* cr = c + i * ldc;
    if (beta == T(0)) std::fill(cr, cr + n, T(0));
    for (int64_t q = 0; q < k; ++q) {
      const T av = a[i * lda + q];
      const T* br = b + q * ldb;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) cr[j] += av * br[j];
    }
  }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T sum = T(0);
  for (int64_t k = 0; k < n; ++k) sum += a[k] * b[k];
  return sum;
}

#if defined(__AVX2__) && defined(__FMA__)
// Eight sums of eight lanes each, as one vector of eight.
inline __m256 sum_rows_of_8(const __m256* acc) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// out[i] = w[i, :] . x for `rows` consecutive rows of w (ld apart): the
// hidden side of one step at batch 1. Eight rows at once share each load
// of x and keep eight independent sums in flight; with AVX-512 a masked
// load takes the last partial vector of each row.
template <typename T>
void matvec(const T* w, int64_t ld, int64_t rows, const T* x, int64_t len, T* out) {
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const int64_t whole = len / 16 * 16;
    const __mmask16 tail = static_cast<__mmask16>((1u << (len - whole)) - 1);
    for (; i + 8 <= rows; i += 8) {
      __m512 acc[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t k = 0; k < whole; k += 16) {
        const __m512 xv = _mm512_loadu_ps(x + k);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w + (i + r) * ld + k), xv, acc[r]);
      }
      if (tail) {
        const __m512 xv = _mm512_maskz_loadu_ps(tail, x + whole);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r)
          acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, w + (i + r) * ld + whole), xv, acc[r]);
      }
      __m256 half[8];  // each row's two 8-lane halves added
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r)
        half[r] = _mm256_add_ps(__builtin_shufflevector(acc[r], acc[r], 0, 1, 2, 3, 4, 5, 6, 7),
                                __builtin_shufflevector(acc[r], acc[r], 8, 9, 10, 11, 12, 13, 14, 15));
      _mm256_storeu_ps(out + i, sum_rows_of_8(half));
    }
  }
#endif
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= rows; i += 8) {
      __m256 acc[8];
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      int64_t k = 0;
      for (; k + 8 <= len; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + k);
#pragma GCC unroll 8
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + (i + r) * ld + k), xv, acc[r]);
      }
      _mm256_storeu_ps(out + i, sum_rows_of_8(acc));
      for (; k < len; ++k)
        for (int r = 0; r < 8; ++r) out[i + r] += w[(i + r) * ld + k] * x[k];
    }
  }
#endif
  for (; i < rows; ++i) out[i] = dot(w + i * ld, x, len);
}

// Packing W_hh into panels (recurrent_panels.h) costs about one pass over
// the weights, which the steps after the first few repay, where the packed
// copy stays in L2. (Eight rows 1 KB apart at a time, as matvec reads them,
// 1024 x 256 took 12.3 us a step here; with 64 rows' values of each k side
// by side, 8.7, and a thread's 512 x 256 share 5.2 -> 3.0.)
constexpr int64_t kStepsToPack = 8;

template <typename T>
void add_rows(T* m, int64_t rows, int64_t cols, const T* bias) {
  for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) m[r * cols + j] += bias[j];
}

template <typename T>
void column_sums(const T* m, int64_t rows, int64_t cols, T* out) {
  std::fill(out, out + cols, T(0));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out[j] += m[r * cols + j];
}

// The input side's bias: b_ih, plus b_hh where it adds straight in: all of
// it but GRU's n gate with linear_before_reset (which r scales). Zeros
// where neither is given.
template <typename T>
std::vector<T> input_bias(Kind k, const Tensor& b_ih, const Tensor& b_hh, int64_t h, bool before_reset) {
  const int64_t gh = gates_of(k) * h, straight = k == Kind::Gru && before_reset ? 2 * h : gh;
  std::vector<T> bias(gh, T(0));
  if (b_ih.defined()) std::memcpy(bias.data(), contiguous(b_ih).data<T>(), gh * sizeof(T));
  if (b_hh.defined()) {
    const Tensor c = contiguous(b_hh);
    for (int64_t j = 0; j < straight; ++j) bias[j] += c.data<T>()[j];
  }
  return bias;
}

// prepared: where the CPU pass "recurrent weights prepared" gave them, W_ih in
// packed_linear's panels, input_bias's values and W_hh in recurrent panels.
template <typename T, Kind K>
void recurrent_forward(const Ins& in, Outs& out, const Attrs& a, const Tensor* prepared = nullptr) {
  const Tensor x = contiguous(in[0]), w_ih = contiguous(in[1]), w_hh = contiguous(in[2]);
  const int64_t steps = x.shape()[0], n = x.shape()[1], input = x.shape()[2], h = w_hh.shape()[1];
  const int64_t gh = gates_of(K) * h, kr = reserve_of(K) * h, rows = steps * n;
  const bool reverse = a.get_bool("reverse", false);
  const bool before_reset = a.get_bool("linear_before_reset", true);
  const bool relu = a.get_string("nonlinearity", "tanh") == "relu";
  const Tensor b_hh = in[4].defined() ? contiguous(in[4]) : Tensor();

  // x W_ih^T + the input side's bias for every step.
  Tensor xw_buffer = Tensor::empty({rows * gh}, x.dtype());
  T* xw = xw_buffer.data<T>();
  [&] {
    if constexpr (std::is_same_v<T, float>) {
      if (prepared && rows <= kPackedLinearRows)
        return packed_linear(x.data<float>(), rows, input, gh, prepared[0].data<float>(), prepared[1].data<float>(), xw,
                             false, false);
    }
    if (rows > 0) gemm<T>(false, true, rows, gh, input, T(1), x.data<T>(), input, w_ih.data<T>(), input, T(0), xw, gh);
    if (in[3].defined() || b_hh.defined())
      add_rows(xw, rows, gh, input_bias<T>(K, in[3], b_hh, h, before_reset).data());
  }();
  const T* b_hn = K == Kind::Gru && before_reset && b_hh.defined() ? b_hh.data<T>() + 2 * h : nullptr;

  std::vector<T> hs = state_of<T>(in[5], n * h);
  std::vector<T> cs = K == Kind::Lstm ? state_of<T>(in[6], n * h) : std::vector<T>();
  std::vector<T> hg(n * gh);
  T* y = out[0].data<T>();
  T* reserve = kr ? out.back().data<T>() : nullptr;
  const T* whh = w_hh.data<T>();
  // GRU without linear_before_reset multiplies r * h before its n gate's
  // product: two products a step, along W_hh^T's rows.
  const bool staged = K == Kind::Gru && !before_reset;
  std::vector<T> whh_t(staged ? h * gh : 0);
  if (staged)
    for (int64_t g = 0; g < gh; ++g)
      for (int64_t j = 0; j < h; ++j) whh_t[j * gh + g] = whh[g * h + j];
  // Step s reads the state step s - 1 wrote into y (the initial state first).
  auto time_of = [&](int64_t s) { return reverse ? steps - 1 - s : s; };
  auto state_before = [&](int64_t s) -> const T* { return s == 0 ? hs.data() : y + time_of(s - 1) * n * h; };
  // The new state of units [j0, j1) of row r at step s from the gates'
  // pre-activations (hg holds the hidden side).
  auto cell = [&](int64_t s, int64_t r, int64_t j0, int64_t j1) {
    const int64_t t = time_of(s);
    const T* xr = xw + (t * n + r) * gh;
    const T* hr = hg.data() + r * gh;
    const T* hp = state_before(s) + r * h;
    T* yr = y + (t * n + r) * h;
    T* res = reserve ? reserve + (t * n + r) * kr : nullptr;
#pragma omp simd
    for (int64_t j = j0; j < j1; ++j) {
      T hv;
      if constexpr (K == Kind::Lstm) {
        const T iv = sigmoid(xr[j] + hr[j]), fv = sigmoid(xr[h + j] + hr[h + j]);
        const T gv = fast_tanh(xr[2 * h + j] + hr[2 * h + j]), ov = sigmoid(xr[3 * h + j] + hr[3 * h + j]);
        const T cv = fv * cs[r * h + j] + iv * gv;
        hv = ov * fast_tanh(cv);
        cs[r * h + j] = cv;
        res[j] = iv, res[h + j] = fv, res[2 * h + j] = gv, res[3 * h + j] = ov, res[4 * h + j] = cv;
      } else if constexpr (K == Kind::Gru) {
        T rv, zv, nv;
        if (before_reset) {
          rv = sigmoid(xr[j] + hr[j]);
          zv = sigmoid(xr[h + j] + hr[h + j]);
          const T hn = hr[2 * h + j] + (b_hn ? b_hn[j] : T(0));
          nv = fast_tanh(xr[2 * h + j] + rv * hn);
          res[j] = rv, res[h + j] = zv, res[3 * h + j] = hn;
        } else {
          rv = res[j], zv = res[h + j];
          nv = fast_tanh(xr[2 * h + j] + hr[2 * h + j]);
        }
        res[2 * h + j] = nv;
        hv = (T(1) - zv) * nv + zv * hp[j];
      } else {
        const T av = xr[j] + hr[j];
        hv = relu ? std::max(av, T(0)) : fast_tanh(av);
      }
      yr[j] = hv;
    }
  };
  // A few rows (batch 1 inference): each hidden unit's gate rows of W_hh
  // dotted with the state, the units split over the threads for all the
  // steps in whole panels, each thread doing its units' gate math too; a
  // barrier between steps is all the threads share. Each streams its own
  // rows of W_hh, packed into panels (recurrent_panels.h) where that pays.
  if (!staged && n <= 4) {
    const int64_t panels = recurrent_panels_of(h);
    const int threads = static_cast<int>(std::clamp<int64_t>(panels, 1, get_num_threads()));
    const float* packed = nullptr;
    Tensor packed_here;
    if constexpr (std::is_same_v<T, float>) {
      // (Where the packed copy would not stay in L2 beside the steps' other
      // data, packing costs more than it saves: one thread's 1024 x 256 ran
      // 1.0 -> 1.2 ms.)
      const int64_t share = gates_of(K) * (panels + threads - 1) / threads * kRecurrentPanel * h * 4;
      if (prepared)
        packed = prepared[2].data<float>();
      else if (steps >= kStepsToPack && share <= cpu_caches().l2_bytes / 2)
        packed_here = Tensor::empty({gates_of(K) * recurrent_gate_panels_size(h)}), packed = packed_here.data<float>();
    }
#pragma omp parallel num_threads(threads) if (threads > 1 && !omp_in_parallel())
    {
      const int64_t me = omp_get_thread_num(), team = omp_get_num_threads();
      const int64_t p0 = panels * me / team, p1 = panels * (me + 1) / team;
      const int64_t j0 = std::min(h, p0 * kRecurrentPanel), j1 = std::min(h, p1 * kRecurrentPanel);
      // Each thread packs the panels it reads.
      if constexpr (std::is_same_v<T, float>)
        if (packed_here.defined()) pack_recurrent_panels(whh, gates_of(K), h, p0, p1, packed_here.data<float>());
      for (int64_t s = 0; s < steps; ++s) {
        for (int64_t r = 0; r < n; ++r) {
          for (int64_t q = 0; q < gates_of(K); ++q) {
            T* product = hg.data() + r * gh + q * h;
            if constexpr (std::is_same_v<T, float>) {
              if (packed) {
                recurrent_panels_matvec(packed + q * recurrent_gate_panels_size(h), h, p0, p1, state_before(s) + r * h,
                                        product);
                continue;
              }
            }
            matvec(whh + (q * h + j0) * h, h, j1 - j0, state_before(s) + r * h, h, product + j0);
          }
          cell(s, r, j0, j1);
        }
#pragma omp barrier
      }
    }
  } else {
    for (int64_t s = 0; s < steps; ++s) {
      const T* hp = state_before(s);
      if (staged) {
        // r and z from h; then n from (r * h), kept in the reserve for backward.
        T* rt = reserve + time_of(s) * n * kr;
        const T* xt = xw + time_of(s) * n * gh;
        step_gemm_nn<T>(n, 2 * h, h, hp, h, whh_t.data(), gh, T(0), hg.data(), gh);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t j = 0; j < h; ++j) {
            const T rv = sigmoid(xt[r * gh + j] + hg[r * gh + j]);
            const T zv = sigmoid(xt[r * gh + h + j] + hg[r * gh + h + j]);
            rt[r * kr + j] = rv;
            rt[r * kr + h + j] = zv;
            rt[r * kr + 3 * h + j] = rv * hp[r * h + j];
          }
        step_gemm_nn<T>(n, h, h, rt + 3 * h, kr, whh_t.data() + 2 * h, gh, T(0), hg.data() + 2 * h, gh);
      } else if (n * gh * h <= kSmall) {  // a library call's fixed cost would outweigh the product
        for (int64_t r = 0; r < n; ++r) matvec(whh, h, gh, hp + r * h, h, hg.data() + r * gh);
      } else {
        gemm<T>(false, true, n, gh, h, T(1), hp, h, whh, h, T(0), hg.data(), gh);
      }
      for_rows(n, gh, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) cell(s, r, 0, h);
      });
    }
  }
  std::memcpy(out[1].data<T>(), state_before(steps), n * h * sizeof(T));
  if constexpr (K == Kind::Lstm) std::memcpy(out[2].data<T>(), cs.data(), n * h * sizeof(T));
}

template <typename T, Kind K>
void recurrent_backward(const Ins& in, Outs& out, const Attrs& a) {
  constexpr bool kLstm = K == Kind::Lstm;
  const size_t base = kLstm ? 3 : 2;
  const Tensor gy = contiguous(in[0]);
  const Tensor x = contiguous(in[base]), w_ih = contiguous(in[base + 1]), w_hh = contiguous(in[base + 2]);
  const size_t y_at = base + (kLstm ? 5 : 4);
  const Tensor y = contiguous(in[y_at]);
  const Tensor reserve_t = reserve_of(K) ? contiguous(in[y_at + 1]) : Tensor();
  const int64_t steps = x.shape()[0], n = x.shape()[1], input = x.shape()[2], h = w_hh.shape()[1];
  const int64_t gh = gates_of(K) * h, kr = reserve_of(K) * h;
  const bool reverse = a.get_bool("reverse", false);
  const bool before_reset = a.get_bool("linear_before_reset", true);
  const bool relu = a.get_string("nonlinearity", "tanh") == "relu";

  std::vector<T> dh = state_of<T>(in[1], n * h), dh_next(n * h);
  std::vector<T> dc = kLstm ? state_of<T>(in[2], n * h) : std::vector<T>();
  const std::vector<T> h0 = state_of<T>(in[base + 3], n * h);
  const std::vector<T> c0 = kLstm ? state_of<T>(in[base + 4], n * h) : std::vector<T>();
  // Pre-activation gradients of every step: the input side's and the hidden
  // side's (they differ only for GRU), and the hidden state each step read.
  std::vector<T> dax(steps * n * gh), dah_own(K == Kind::Gru ? steps * n * gh : 0), hprev(steps * n * h), d_rh;
  T* dah = K == Kind::Gru ? dah_own.data() : dax.data();
  if (K == Kind::Gru && !before_reset) d_rh.resize(n * h);
  const T* ys = y.data<T>();
  const T* g = gy.data<T>();
  const T* res_all = kr ? reserve_t.data<T>() : nullptr;
  const T* whh = w_hh.data<T>();
  for (int64_t s = steps - 1; s >= 0; --s) {
    const int64_t t = reverse ? steps - 1 - s : s, tp = reverse ? t + 1 : t - 1;
    const T* hp = s == 0 ? h0.data() : ys + tp * n * h;
    std::memcpy(hprev.data() + t * n * h, hp, n * h * sizeof(T));
    const T* gt = g + t * n * h;
    const T* rt = res_all ? res_all + t * n * kr : nullptr;
    T* ax = dax.data() + t * n * gh;
    T* ah = dah + t * n * gh;
    const T* cp = nullptr;  // the previous cell state, rows cp_stride apart
    int64_t cp_stride = h;
    if constexpr (kLstm) {
      if (s > 0) cp = res_all + tp * n * kr + 4 * h, cp_stride = kr;
      else cp = c0.data();
    }
    for_rows(n, gh, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* res = rt ? rt + r * kr : nullptr;
        for (int64_t j = 0; j < h; ++j) {
          const int64_t e = r * h + j, ge = r * gh + j;
          const T dhv = dh[e] + gt[e];
          if constexpr (kLstm) {
            const T iv = res[j], fv = res[h + j], gv = res[2 * h + j], ov = res[3 * h + j], tc = std::tanh(res[4 * h + j]);
            const T dcv = dc[e] + dhv * ov * (T(1) - tc * tc);
            ax[ge] = dcv * gv * iv * (T(1) - iv);
            ax[ge + h] = dcv * cp[r * cp_stride + j] * fv * (T(1) - fv);
            ax[ge + 2 * h] = dcv * iv * (T(1) - gv * gv);
            ax[ge + 3 * h] = dhv * tc * ov * (T(1) - ov);
            dc[e] = dcv * fv;
            dh_next[e] = T(0);
          } else if constexpr (K == Kind::Gru) {
            const T rv = res[j], zv = res[h + j], nv = res[2 * h + j];
            const T dz = dhv * (hp[e] - nv), dn = dhv * (T(1) - zv) * (T(1) - nv * nv);
            ax[ge + h] = ah[ge + h] = dz * zv * (T(1) - zv);
            ax[ge + 2 * h] = dn;
            dh_next[e] = dhv * zv;
            if (before_reset) {
              ax[ge] = ah[ge] = dn * res[3 * h + j] * rv * (T(1) - rv);
              ah[ge + 2 * h] = dn * rv;
            } else {
              ah[ge + 2 * h] = dn;  // r is set below, once d(r * h) is known
            }
          } else {
            const T yv = ys[t * n * h + e];
            ax[ge] = dhv * (relu ? T(yv > T(0)) : T(1) - yv * yv);
            dh_next[e] = T(0);
          }
        }
      }
    });
    if (K == Kind::Gru && !before_reset) {
      // n = tanh(x_n + (r * h) W_hn^T + b_hn): d(r * h) = dn W_hn.
      step_gemm_nn<T>(n, h, h, ah + 2 * h, gh, whh + 2 * h * h, h, T(0), d_rh.data(), h);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < h; ++j) {
          const int64_t e = r * h + j, ge = r * gh + j;
          const T rv = rt[r * kr + j];
          ax[ge] = ah[ge] = d_rh[e] * hp[e] * rv * (T(1) - rv);
          dh_next[e] += d_rh[e] * rv;
        }
      step_gemm_nn<T>(n, h, 2 * h, ah, gh, whh, h, T(1), dh_next.data(), h);
    } else {
      step_gemm_nn<T>(n, h, gh, ah, gh, whh, h, T(1), dh_next.data(), h);
    }
    std::swap(dh, dh_next);
  }

  const int64_t rows = steps * n;
  T* gx = out[0].data<T>();
  T* gw_ih = out[1].data<T>();
  T* gw_hh = out[2].data<T>();
  if (rows == 0) {
    std::fill(gw_ih, gw_ih + gh * input, T(0));
    std::fill(gw_hh, gw_hh + gh * h, T(0));
  } else {
    gemm<T>(false, false, rows, input, gh, T(1), dax.data(), gh, w_ih.data<T>(), input, T(0), gx, input);
    gemm<T>(true, false, gh, input, rows, T(1), dax.data(), gh, x.data<T>(), input, T(0), gw_ih, input);
    if (K == Kind::Gru && !before_reset) {
      gemm<T>(true, false, 2 * h, h, rows, T(1), dah, gh, hprev.data(), h, T(0), gw_hh, h);
      gemm<T>(true, false, h, h, rows, T(1), dah + 2 * h, gh, res_all + 3 * h, kr, T(0), gw_hh + 2 * h * h, h);
    } else {
      gemm<T>(true, false, gh, h, rows, T(1), dah, gh, hprev.data(), h, T(0), gw_hh, h);
    }
  }
  column_sums(dax.data(), rows, gh, out[3].data<T>());
  column_sums(dah, rows, gh, out[4].data<T>());
  std::memcpy(out[5].data<T>(), dh.data(), n * h * sizeof(T));
  if constexpr (kLstm) std::memcpy(out[6].data<T>(), dc.data(), n * h * sizeof(T));
}

template <typename T>
void lstm_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_forward<T, Kind::Lstm>(in, out, a); }
template <typename T>
void gru_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_forward<T, Kind::Gru>(in, out, a); }
template <typename T>
void rnn_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_forward<T, Kind::Rnn>(in, out, a); }
template <typename T>
void lstm_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_backward<T, Kind::Lstm>(in, out, a); }
template <typename T>
void gru_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_backward<T, Kind::Gru>(in, out, a); }
template <typename T>
void rnn_backward_kernel(const Ins& in, Outs& out, const Attrs& a) { recurrent_backward<T, Kind::Rnn>(in, out, a); }

Kind kind_of(const std::string& op) {
  KILN_CHECK(op == "lstm" || op == "gru" || op == "rnn", "no recurrent op named ", op);
  return op == "lstm" ? Kind::Lstm : op == "gru" ? Kind::Gru : Kind::Rnn;
}

}  // namespace

Tensor recurrent_input_bias(const std::string& op, const Tensor& b_ih, const Tensor& b_hh, int64_t hidden,
                            bool linear_before_reset) {
  const std::vector<float> bias = input_bias<float>(kind_of(op), b_ih, b_hh, hidden, linear_before_reset);
  Tensor t = Tensor::empty({static_cast<int64_t>(bias.size())});
  std::memcpy(t.data<float>(), bias.data(), bias.size() * sizeof(float));
  return t;
}

Tensor recurrent_hidden_panels(const Tensor& w_hh) {
  const int64_t h = w_hh.shape()[1], gates = w_hh.shape()[0] / h;
  Tensor t = Tensor::empty({gates * recurrent_gate_panels_size(h)});
  pack_recurrent_panels(contiguous(w_hh).data<float>(), gates, h, 0, recurrent_panels_of(h), t.data<float>());
  return t;
}

void recurrent_forward_prepared(const std::string& op, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                const Attrs& a) {
  const Kind k = kind_of(op);
  const size_t prepared = k == Kind::Lstm ? 7 : 6;  // the op's own inputs first
  KILN_CHECK(in.size() == prepared + 3, op, " with prepared weights takes ", prepared + 3, " inputs, got ", in.size());
  if (k == Kind::Lstm) return recurrent_forward<float, Kind::Lstm>(in, out, a, &in[prepared]);
  if (k == Kind::Gru) return recurrent_forward<float, Kind::Gru>(in, out, a, &in[prepared]);
  recurrent_forward<float, Kind::Rnn>(in, out, a, &in[prepared]);
}

KILN_CPU_F32_F64("lstm", lstm_kernel);
KILN_CPU_F32_F64("gru", gru_kernel);
KILN_CPU_F32_F64("rnn", rnn_kernel);
KILN_CPU_F32_F64("lstm_backward", lstm_backward_kernel);
KILN_CPU_F32_F64("gru_backward", gru_backward_kernel);
KILN_CPU_F32_F64("rnn_backward", rnn_backward_kernel);

}  // namespace kiln::cpu

// CPU kernels of matmul and linear. Operands whose last two axes are
// row-major or transposed go to GEMM without a copy: oneDNN for float32 and
// bfloat16, OpenBLAS for float64.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include <vector>

#include "backends/cpu/gemm.h"
#include "backends/cpu/half_convert.h"
#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/onednn_gemm_bf16.h"

namespace kiln::cpu {

namespace {
// With nothing to sum (k = 0) C = beta C, as BLAS defines it; oneDNN's
// sgemm leaves C as it was then, and OpenBLAS refuses the leading
// dimensions of empty operands.
template <typename T>
void scale_only(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
}
}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  // oneDNN's sgemm runs on the same OpenMP threads as every other Kiln
  // kernel; OpenBLAS's own thread pool would spin against them.
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  KILN_CHECK(st == dnnl_success, "oneDNN sgemm failed with status ", static_cast<int>(st), " for ", m, "x", k, " @ ", k,
             "x", n);
}

template <>
void gemm<double>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                  const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) return scale_only(m, n, beta, c, ldc);
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

namespace {

// rows x cols values of a matrix with leading dimension ld, to or from a
// packed float32 one.
void widen_rows(const BFloat16* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    bfloat16_to_float(reinterpret_cast<const uint16_t*>(src + r * ld), dst + r * cols, cols);
}
void round_rows(const float* src, int64_t rows, int64_t cols, BFloat16* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) float_to_bfloat16(src + r * cols, reinterpret_cast<uint16_t*>(dst + r * ld), cols);
}

}  // namespace

// bfloat16 (alpha 1, beta 0 or 1, as the kernels below call it): oneDNN's
// bfloat16 matmul where the CPU multiplies bfloat16 natively, at about twice
// float32's rate; elsewhere float32's GEMM on widened copies, rounded back,
// which gives the same products (a bfloat16 product is exact in float32).
template <>
void gemm<BFloat16>(bool ta, bool tb, int64_t m, int64_t n, int64_t k, BFloat16 alpha, const BFloat16* a, int64_t lda,
                    const BFloat16* b, int64_t ldb, BFloat16 beta, BFloat16* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  const bool accumulate = static_cast<float>(beta) != 0.0f;
  KILN_ASSERT(static_cast<float>(alpha) == 1.0f && (!accumulate || static_cast<float>(beta) == 1.0f),
              "bfloat16 GEMM takes alpha 1 and beta 0 or 1");
  auto bits = [](const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); };
  if (onednn::native_bf16() &&
      onednn::gemm_bf16(ta, tb, m, n, k, bits(a), lda, bits(b), ldb, reinterpret_cast<uint16_t*>(c), ldc, accumulate))
    return;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  std::vector<float> wa(static_cast<size_t>(a_rows * a_cols)), wb(static_cast<size_t>(b_rows * b_cols)),
      wc(static_cast<size_t>(m * n));
  widen_rows(a, lda, a_rows, a_cols, wa.data());
  widen_rows(b, ldb, b_rows, b_cols, wb.data());
  if (accumulate) widen_rows(c, ldc, m, n, wc.data());
  gemm<float>(ta, tb, m, n, k, 1.0f, wa.data(), a_cols, wb.data(), b_cols, accumulate ? 1.0f : 0.0f, wc.data(), n);
  round_rows(wc.data(), m, n, c, ldc);
}

namespace {

// How BLAS should read the last two axes of t ([rows, cols]): transposed or
// not, and the leading dimension. False when neither layout fits.
bool blas_layout(const Tensor& t, bool& trans, int64_t& ld) {
  int64_t rows = t.shape()[t.dim() - 2], cols = t.shape()[t.dim() - 1];
  int64_t rs = t.strides()[t.dim() - 2], cs = t.strides()[t.dim() - 1];
  if ((cs == 1 || cols == 1) && (rs >= std::max<int64_t>(cols, 1) || rows == 1)) {
    trans = false;
    ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    return true;
  }
  if ((rs == 1 || rows == 1) && (cs >= std::max<int64_t>(rows, 1) || cols == 1)) {
    trans = true;
    ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    return true;
  }
  return false;
}

template <typename T>
void matmul_kernel(const Ins& in, Outs& out, const Attrs&) {
  Tensor& y = out[0];
  int64_t m = y.shape()[y.dim() - 2], n = y.shape()[y.dim() - 1];
  int64_t k = in[0].shape().back();
  Shape batch(y.shape().begin(), y.shape().end() - 2);
  auto expand_to = [&](const Tensor& t, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return expanded(t, s);
  };
  Tensor a = expand_to(in[0], m, k), b = expand_to(in[1], k, n);
  bool ta, tb;
  int64_t lda, ldb;
  if (!blas_layout(a, ta, lda)) {
    a = contiguous(a);
    blas_layout(a, ta, lda);
  }
  if (!blas_layout(b, tb, ldb)) {
    b = contiguous(b);
    blas_layout(b, tb, ldb);
  }
  if (k == 0) {
    std::fill(y.data<T>(), y.data<T>() + y.numel(), T(0));
    return;
  }
  int64_t nb = numel_of(batch);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* py = y.data<T>();
  // One matrix for every batch entry ([B, M, K] @ [K, N], a projection
  // exported as MatMul) with row-major rows stacked evenly: one GEMM of B*M rows.
  bool shared_b = true, stacked_a = !ta && nb > 1;
  int64_t expected = m * lda;
  for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
    shared_b = shared_b && (b.strides()[d] == 0 || batch[d] == 1);
    stacked_a = stacked_a && (a.strides()[d] == expected || batch[d] == 1);
    expected *= batch[d];
  }
  if (shared_b && stacked_a && lda == k) {
    gemm<T>(false, tb, nb * m, n, k, T(1), pa, lda, pb, ldb, T(0), py, n);
    return;
  }
  auto one = [&](int64_t i) {
    int64_t oa = 0, ob = 0, rem = i;
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * a.strides()[d];
      ob += idx * b.strides()[d];
    }
    gemm<T>(ta, tb, m, n, k, T(1), pa + oa, lda, pb + ob, ldb, T(0), py + i * m * n, n);
  };
  // Many small products (attention heads): one per thread, each GEMM on its
  // own thread (inside a parallel region oneDNN runs single-threaded).
  if (nb >= 2 && m * n * k <= (int64_t{1} << 20)) {
    parallel_for(nb, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) one(i);
    });
    return;
  }
  for (int64_t i = 0; i < nb; ++i) one(i);
}

template <typename T>
void linear_kernel(const Ins& in, Outs& out, const Attrs&) {
  const Tensor x = contiguous(in[0]);
  const Tensor w = contiguous(in[1]);
  Tensor& y = out[0];
  int64_t o = w.shape()[0], i = w.shape()[1];
  int64_t rows = i == 0 ? y.numel() / std::max<int64_t>(o, 1) : x.numel() / i;
  T* py = y.data<T>();
  bool has_bias = in.size() > 2 && in[2].defined();
  if (has_bias) {
    const Tensor b = contiguous(in[2]);
    const T* pb = b.data<T>();
    parallel_for(rows, 256, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) std::copy(pb, pb + o, py + r * o);
    });
  }
  if (i == 0) {
    if (!has_bias) std::fill(py, py + y.numel(), T(0));
    return;
  }
  gemm<T>(false, true, rows, o, i, T(1), x.data<T>(), i, w.data<T>(), i, has_bias ? T(1) : T(0), py, o);
}

}  // namespace

KILN_CPU_F32_F64("matmul", matmul_kernel);
KILN_CPU_F32_F64("linear", linear_kernel);
KILN_REGISTER_KERNEL("matmul", CPU, matmul_kernel<BFloat16>, DType::BFloat16);
KILN_REGISTER_KERNEL("linear", CPU, linear_kernel<BFloat16>, DType::BFloat16);

}  // namespace kiln::cpu

#pragma once
// Strided, broadcasting loops over K operands (output first). Dimensions that
// are contiguous in every operand are merged, so a contiguous op becomes one
// flat loop and a bias add becomes a 2-D loop; the innermost run is handed
// to a callback that the compiler can vectorize.
#include <array>
#include <cstdint>

#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

constexpr int kMaxDims = 12;
constexpr int64_t kGrainElements = 32768;

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <int K>
struct LoopPlan {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[K][kMaxDims] = {};  // in elements; 0 on broadcast axes
};

// Builds the plan for operands broadcast to `shape`.
template <int K>
LoopPlan<K> make_plan(const Shape& shape, const std::array<const Tensor*, K>& ops) {
  LoopPlan<K> p;
  int nd = static_cast<int>(shape.size());
  KILN_CHECK(nd <= kMaxDims, "tensors of rank ", nd, " are not supported (at most ", kMaxDims, ")");
  int64_t tmp_shape[kMaxDims];
  int64_t tmp_strides[K][kMaxDims];
  for (int d = 0; d < nd; ++d) tmp_shape[d] = shape[d];
  for (int k = 0; k < K; ++k) {
    const Tensor& t = *ops[k];
    int off = nd - static_cast<int>(t.dim());
    for (int d = 0; d < nd; ++d) {
      int td = d - off;
      tmp_strides[k][d] = (td < 0 || t.shape()[td] == 1) ? 0 : t.strides()[td];
    }
  }
  // Drop size-1 axes, then merge axis d into d+1 when every operand allows.
  int n = 0;
  for (int d = 0; d < nd; ++d) {
    if (tmp_shape[d] == 1) continue;
    p.shape[n] = tmp_shape[d];
    for (int k = 0; k < K; ++k) p.strides[k][n] = tmp_strides[k][d];
    ++n;
  }
  int m = 0;
  for (int d = 0; d < n; ++d) {
    if (m > 0) {
      bool mergeable = true;
      for (int k = 0; k < K; ++k)
        mergeable = mergeable && p.strides[k][m - 1] == p.strides[k][d] * p.shape[d];
      if (mergeable) {
        p.shape[m - 1] *= p.shape[d];
        for (int k = 0; k < K; ++k) p.strides[k][m - 1] = p.strides[k][d];
        continue;
      }
    }
    p.shape[m] = p.shape[d];
    for (int k = 0; k < K; ++k) p.strides[k][m] = p.strides[k][d];
    ++m;
  }
  p.ndim = m;
  return p;
}

// inner(ptrs, inner_strides, n): processes n elements starting at ptrs[k],
// stepping inner_strides[k] elements.
template <int K, typename Inner>
void run_plan(const LoopPlan<K>& p, const std::array<char*, K>& base, const std::array<int64_t, K>& elem_size,
              Inner&& inner) {
  if (p.ndim == 0) {
    std::array<int64_t, K> s{};
    inner(base, s, int64_t{1});
    return;
  }
  const int last = p.ndim - 1;
  const int64_t n_inner = p.shape[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= p.shape[d];
  std::array<int64_t, K> inner_strides;
  for (int k = 0; k < K; ++k) inner_strides[k] = p.strides[k][last];
  if (rows == 1) {
    // One long run: split it across threads directly.
    parallel_for(n_inner, kGrainElements, [&](int64_t b, int64_t e) {
      std::array<char*, K> ptrs;
      for (int k = 0; k < K; ++k) ptrs[k] = base[k] + b * inner_strides[k] * elem_size[k];
      inner(ptrs, inner_strides, e - b);
    });
    return;
  }
  int64_t grain_rows = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(n_inner, 1));
  parallel_for(rows, grain_rows, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      std::array<char*, K> ptrs = base;
      int64_t rem = r;
      for (int d = last - 1; d >= 0; --d) {
        int64_t i = rem % p.shape[d];
        rem /= p.shape[d];
        for (int k = 0; k < K; ++k) ptrs[k] += i * p.strides[k][d] * elem_size[k];
      }
      inner(ptrs, inner_strides, n_inner);
    }
  });
}

// out[i] = f(x[i]) with out freshly allocated (or any layout).
template <typename T, typename R, typename F>
void unary_map(const Tensor& x, Tensor& out, F f) {
  auto plan = make_plan<2>(out.shape(), {&out, &x});
  run_plan<2>(plan, {static_cast<char*>(out.raw_data()), static_cast<char*>(x.raw_data())},
              {sizeof(R), sizeof(T)}, [&](const std::array<char*, 2>& p, const std::array<int64_t, 2>& s, int64_t n) {
                R* o = reinterpret_cast<R*>(p[0]);
                const T* a = reinterpret_cast<const T*>(p[1]);
                if (s[0] == 1 && s[1] == 1) {
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<compute_t<T>>(a[i])));
                } else {
                  for (int64_t i = 0; i < n; ++i)
                    o[i * s[0]] = static_cast<R>(f(static_cast<compute_t<T>>(a[i * s[1]])));
                }
              });
}

// out[i] = f(a[i], b[i]) with broadcasting.
template <typename T, typename R, typename F>
void binary_map(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  using C = compute_t<T>;
  auto plan = make_plan<3>(out.shape(), {&out, &a, &b});
  run_plan<3>(plan,
              {static_cast<char*>(out.raw_data()), static_cast<char*>(a.raw_data()), static_cast<char*>(b.raw_data())},
              {sizeof(R), sizeof(T), sizeof(T)},
              [&](const std::array<char*, 3>& p, const std::array<int64_t, 3>& s, int64_t n) {
                R* o = reinterpret_cast<R*>(p[0]);
                const T* x = reinterpret_cast<const T*>(p[1]);
                const T* y = reinterpret_cast<const T*>(p[2]);
                if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
                } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
                  const C yv = static_cast<C>(y[0]);
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), yv));
                } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
                  const C xv = static_cast<C>(x[0]);
                  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(xv, static_cast<C>(y[i])));
                } else {
                  for (int64_t i = 0; i < n; ++i)
                    o[i * s[0]] = static_cast<R>(f(static_cast<C>(x[i * s[1]]), static_cast<C>(y[i * s[2]])));
                }
              });
}

// Copies src (broadcast) into dst, any layouts, same dtype.
void strided_copy(const Tensor& src, Tensor& dst);

// Layouts for kernels, without running ops (views.cpp): a view of t's storage
// (no autograd metadata); `t` itself when it is contiguous, else a dense copy;
// views with their axes reordered or broadcast.
Tensor alias(const Tensor& t, Shape shape, Strides strides, int64_t offset);
Tensor contiguous(const Tensor& t);
Tensor permuted(const Tensor& t, const std::vector<int64_t>& order);
Tensor expanded(const Tensor& t, const Shape& shape);

}  // namespace kiln::cpu

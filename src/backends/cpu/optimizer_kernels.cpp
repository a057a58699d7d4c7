// Fused optimizer updates: one parallel pass per parameter, or one over a
// whole group's parameters (the multi-tensor forms). The arithmetic is
// done in the parameter's type in the same order as the unfused ops, so eager
// and compiled training agree to rounding.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/kernel_helpers.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kGrain = 1 << 14;

template <typename T>
T* contiguous_data(const Tensor& t, const char* what) {
  KILN_CHECK(t.is_contiguous(), what, " must be contiguous; call .contiguous() first");
  return t.data<T>();
}

double scalar(const Tensor& t) { return *t.data<double>(); }

// The guard input: the step's loss. A non-finite loss skips the update.
bool skip(const Ins& in, size_t index) {
  if (in.size() <= index || !in[index].defined()) return false;
  const Tensor& l = in[index];
  double v = l.dtype() == DType::Float64 ? *l.data<double>() : static_cast<double>(*l.data<float>());
  return !std::isfinite(v);
}

// SGD over elements [b, e) of one parameter (buf: null without momentum).
template <typename T>
struct SgdMath {
  T neg_lr, m, wd;
  bool nesterov;
  // Branch-free loops per case, so each vectorizes.
  void run(T* p, const T* g, T* buf, int64_t b, int64_t e) const {
    if (!buf) {
      for (int64_t i = b; i < e; ++i) p[i] = p[i] + (g[i] + p[i] * wd) * neg_lr;
    } else if (!nesterov) {
      for (int64_t i = b; i < e; ++i) {
        T nb = buf[i] * m + (g[i] + p[i] * wd);
        buf[i] = nb;
        p[i] = p[i] + nb * neg_lr;
      }
    } else {
      for (int64_t i = b; i < e; ++i) {
        T d = g[i] + p[i] * wd;
        T nb = buf[i] * m + d;
        buf[i] = nb;
        p[i] = p[i] + (d + nb * m) * neg_lr;
      }
    }
  }
};

template <typename T>
SgdMath<T> sgd_math(const Tensor& lr, const Attrs& a) {
  return {static_cast<T>(-scalar(lr)), static_cast<T>(a.get_float("momentum", 0)),
          static_cast<T>(a.get_float("weight_decay", 0)), a.get_bool("nesterov", false)};
}

// Adam (AdamW with decoupled) over elements [b, e) of one parameter.
template <typename T>
struct AdamMath {
  T b1, b2, one_b1, one_b2, eps, bc2, step_size, decay, l2;
  bool decoupled, decays;
  void run(T* p, const T* g, T* m, T* v, int64_t b, int64_t e) const {
    for (int64_t i = b; i < e; ++i) {
      if (decoupled && decays) p[i] = p[i] * decay;
      T d = (!decoupled && decays) ? g[i] + p[i] * l2 : g[i];
      m[i] = m[i] * b1 + d * one_b1;
      v[i] = v[i] * b2 + d * d * one_b2;
      p[i] = p[i] + m[i] / (std::sqrt(v[i] / bc2) + eps) * step_size;
    }
  }
};

template <typename T>
AdamMath<T> adam_math(const Tensor& lr_tensor, const Tensor& step_tensor, const Attrs& a) {
  const double lr = scalar(lr_tensor), step = scalar(step_tensor);
  const double beta1 = a.get_float("beta1"), beta2 = a.get_float("beta2"), wd = a.get_float("weight_decay", 0);
  return {static_cast<T>(beta1),
          static_cast<T>(beta2),
          static_cast<T>(1 - beta1),
          static_cast<T>(1 - beta2),
          static_cast<T>(a.get_float("eps")),
          static_cast<T>(1 - std::pow(beta2, step)),
          static_cast<T>(-lr / (1 - std::pow(beta1, step))),
          static_cast<T>(1 - lr * wd),
          static_cast<T>(wd),
          a.get_bool("decoupled", false),
          wd != 0};
}

// RMSProp over elements [b, e) of one parameter (buf: null without momentum).
template <typename T>
struct RmsPropMath {
  T neg_lr, al, one_al, eps, m, wd;
  void run(T* p, const T* g, T* sq, T* buf, int64_t b, int64_t e) const {
    for (int64_t i = b; i < e; ++i) {
      T d = wd != T(0) ? g[i] + p[i] * wd : g[i];
      sq[i] = sq[i] * al + d * d * one_al;
      T u = d / (std::sqrt(sq[i]) + eps);
      if (buf) {
        buf[i] = buf[i] * m + u;
        u = buf[i];
      }
      p[i] = p[i] + u * neg_lr;
    }
  }
};

template <typename T>
RmsPropMath<T> rmsprop_math(const Tensor& lr, const Attrs& a) {
  const double alpha = a.get_float("alpha");
  return {static_cast<T>(-scalar(lr)),
          static_cast<T>(alpha),
          static_cast<T>(1 - alpha),
          static_cast<T>(a.get_float("eps")),
          static_cast<T>(a.get_float("momentum", 0)),
          static_cast<T>(a.get_float("weight_decay", 0))};
}

template <typename T>
void sgd_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 4)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* buf = in[2].defined() ? contiguous_data<T>(in[2], "momentum_buffer") : nullptr;
  const SgdMath<T> math = sgd_math<T>(in[3], a);
  KILN_CHECK(buf || math.m == T(0), "momentum needs a momentum_buffer");
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) { math.run(p, g, buf, b, e); });
}

template <typename T>
void adam_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 6)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* m = contiguous_data<T>(in[2], "exp_avg");
  T* v = contiguous_data<T>(in[3], "exp_avg_sq");
  const AdamMath<T> math = adam_math<T>(in[4], in[5], a);
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) { math.run(p, g, m, v, b, e); });
}

// fn(tensor, begin, end) over every parameter's elements [begin, end), as
// one range split over the threads: a group of many small parameters
// (biases, norms) is one parallel pass, not one each.
template <typename Fn>
void for_all_elements(const Ins& in, size_t first, int64_t count, const Fn& fn) {
  std::vector<int64_t> start(static_cast<size_t>(count) + 1, 0);
  for (int64_t t = 0; t < count; ++t) start[t + 1] = start[t] + in[first + t].numel();
  parallel_for(start.back(), kGrain, [&](int64_t b, int64_t e) {
    int64_t t = std::upper_bound(start.begin(), start.end(), b) - start.begin() - 1;
    for (; t < count && start[t] < e; ++t)
      fn(t, std::max(b, start[t]) - start[t], std::min(e, start[t + 1]) - start[t]);
  });
}

template <typename T>
void sgd_update_many_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 1)) return;
  const int64_t count = a.get_int("count");
  const SgdMath<T> math = sgd_math<T>(in[0], a);
  const bool momentum = math.m != T(0);
  std::vector<T*> p(count), buf(count, nullptr);
  std::vector<const T*> g(count);
  for (int64_t t = 0; t < count; ++t) {
    p[t] = contiguous_data<T>(in[2 + t], "param");
    g[t] = contiguous_data<T>(in[2 + count + t], "grad");
    if (momentum) buf[t] = contiguous_data<T>(in[2 + 2 * count + t], "momentum_buffer");
  }
  for_all_elements(in, 2, count, [&](int64_t t, int64_t b, int64_t e) { math.run(p[t], g[t], buf[t], b, e); });
}

template <typename T>
void adam_update_many_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 2)) return;
  const int64_t count = a.get_int("count");
  const AdamMath<T> math = adam_math<T>(in[0], in[1], a);
  std::vector<T*> p(count), m(count), v(count);
  std::vector<const T*> g(count);
  for (int64_t t = 0; t < count; ++t) {
    p[t] = contiguous_data<T>(in[3 + t], "param");
    g[t] = contiguous_data<T>(in[3 + count + t], "grad");
    m[t] = contiguous_data<T>(in[3 + 2 * count + t], "exp_avg");
    v[t] = contiguous_data<T>(in[3 + 3 * count + t], "exp_avg_sq");
  }
  for_all_elements(in, 3, count, [&](int64_t t, int64_t b, int64_t e) { math.run(p[t], g[t], m[t], v[t], b, e); });
}

template <typename T>
void rmsprop_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 5)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* sq = contiguous_data<T>(in[2], "square_avg");
  T* buf = in[3].defined() ? contiguous_data<T>(in[3], "momentum_buffer") : nullptr;
  const RmsPropMath<T> math = rmsprop_math<T>(in[4], a);
  KILN_CHECK(buf || math.m == T(0), "momentum needs a momentum_buffer");
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) { math.run(p, g, sq, buf, b, e); });
}

template <typename T>
void rmsprop_update_many_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 1)) return;
  const int64_t count = a.get_int("count");
  const RmsPropMath<T> math = rmsprop_math<T>(in[0], a);
  const bool momentum = math.m != T(0);
  std::vector<T*> p(count), sq(count), buf(count, nullptr);
  std::vector<const T*> g(count);
  for (int64_t t = 0; t < count; ++t) {
    p[t] = contiguous_data<T>(in[2 + t], "param");
    g[t] = contiguous_data<T>(in[2 + count + t], "grad");
    sq[t] = contiguous_data<T>(in[2 + 2 * count + t], "square_avg");
    if (momentum) buf[t] = contiguous_data<T>(in[2 + 3 * count + t], "momentum_buffer");
  }
  for_all_elements(in, 2, count, [&](int64_t t, int64_t b, int64_t e) { math.run(p[t], g[t], sq[t], buf[t], b, e); });
}

}  // namespace

KILN_CPU_F32_F64("sgd_update", sgd_update_kernel);
KILN_CPU_F32_F64("adam_update", adam_update_kernel);
KILN_CPU_F32_F64("rmsprop_update", rmsprop_update_kernel);
KILN_CPU_F32_F64("sgd_update_many", sgd_update_many_kernel);
KILN_CPU_F32_F64("adam_update_many", adam_update_many_kernel);
KILN_CPU_F32_F64("rmsprop_update_many", rmsprop_update_many_kernel);

}  // namespace kiln::cpu

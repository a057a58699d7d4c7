// Fused optimizer updates: one parallel pass per parameter. The arithmetic is
// done in the parameter's type in the same order as the unfused ops, so eager
// and compiled training agree to rounding.
#include <cmath>

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

template <typename T>
void sgd_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 4)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* buf = in[2].defined() ? contiguous_data<T>(in[2], "momentum_buffer") : nullptr;
  const T neg_lr = static_cast<T>(-scalar(in[3]));
  const T m = static_cast<T>(a.get_float("momentum", 0)), wd = static_cast<T>(a.get_float("weight_decay", 0));
  const bool nesterov = a.get_bool("nesterov", false);
  KILN_CHECK(buf || m == T(0), "momentum needs a momentum_buffer");
  // Branch-free loops per case, so each vectorizes.
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) {
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
  });
}

template <typename T>
void adam_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 6)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* m = contiguous_data<T>(in[2], "exp_avg");
  T* v = contiguous_data<T>(in[3], "exp_avg_sq");
  const double lr = scalar(in[4]), step = scalar(in[5]);
  const double beta1 = a.get_float("beta1"), beta2 = a.get_float("beta2");
  const double wd = a.get_float("weight_decay", 0);
  const bool decoupled = a.get_bool("decoupled", false);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2), one_b1 = static_cast<T>(1 - beta1),
          one_b2 = static_cast<T>(1 - beta2), eps = static_cast<T>(a.get_float("eps"));
  const T bc2 = static_cast<T>(1 - std::pow(beta2, step));
  const T step_size = static_cast<T>(-lr / (1 - std::pow(beta1, step)));
  const T decay = static_cast<T>(1 - lr * wd), l2 = static_cast<T>(wd);
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if (decoupled && wd != 0) p[i] = p[i] * decay;
      T d = (!decoupled && wd != 0) ? g[i] + p[i] * l2 : g[i];
      m[i] = m[i] * b1 + d * one_b1;
      v[i] = v[i] * b2 + d * d * one_b2;
      p[i] = p[i] + m[i] / (std::sqrt(v[i] / bc2) + eps) * step_size;
    }
  });
}

template <typename T>
void rmsprop_update_kernel(const Ins& in, Outs&, const Attrs& a) {
  if (skip(in, 5)) return;
  T* p = contiguous_data<T>(in[0], "param");
  const T* g = contiguous_data<T>(in[1], "grad");
  T* sq = contiguous_data<T>(in[2], "square_avg");
  T* buf = in[3].defined() ? contiguous_data<T>(in[3], "momentum_buffer") : nullptr;
  const T neg_lr = static_cast<T>(-scalar(in[4]));
  const double alpha = a.get_float("alpha");
  const T al = static_cast<T>(alpha), one_al = static_cast<T>(1 - alpha), eps = static_cast<T>(a.get_float("eps"));
  const T m = static_cast<T>(a.get_float("momentum", 0)), wd = static_cast<T>(a.get_float("weight_decay", 0));
  KILN_CHECK(buf || m == T(0), "momentum needs a momentum_buffer");
  parallel_for(in[0].numel(), kGrain, [&](int64_t b, int64_t e) {
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
  });
}

}  // namespace

KILN_CPU_F32_F64("sgd_update", sgd_update_kernel);
KILN_CPU_F32_F64("adam_update", adam_update_kernel);
KILN_CPU_F32_F64("rmsprop_update", rmsprop_update_kernel);

}  // namespace kiln::cpu

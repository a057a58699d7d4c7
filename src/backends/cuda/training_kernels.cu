// Sums over any axes, softmax, layer and batch norm, dropout, embedding,
// the fused cross entropy, the fused SGD and Adam updates, and max and
// adaptive average pooling, with the backward ops, on CUDA. A reduction gives each output a block whose
// threads stride over its reduced positions and combine through warp
// shuffles and shared memory; cross entropy gives each row a block.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cuda/stored.h"
#include "backends/cuda/training_launch.h"
#include "core/philox.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;  // a multiple of the warp's 32

template <typename T>
__device__ T warp_sum(T v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffffu, v, d);
  return v;
}
template <typename T>
__device__ T warp_max(T v) {
  for (int d = 16; d > 0; d /= 2) v = max(v, __shfl_down_sync(0xffffffffu, v, d));
  return v;
}

// The block's total (or maximum) of every thread's v, in every thread.
template <typename T, bool kMax>
__device__ T block_combine(T v) {
  __shared__ T partial[kThreads / 32];
  __shared__ T result;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    T w = lane < warps ? partial[lane] : (kMax ? -INFINITY : T(0));
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) result = w;
  }
  __syncthreads();
  const T r = result;
  __syncthreads();  // (the next call may reuse the shared slots)
  return r;
}
template <typename T>
__device__ T block_sum(T v) {
  return block_combine<T, false>(v);
}
template <typename T>
__device__ T block_max(T v) {
  return block_combine<T, true>(v);
}

unsigned grid_for(int64_t blocks) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 1 << 16));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) KILN_FAIL("CUDA: the ", kernel, " kernel did not launch: ", cudaGetErrorString(status));
}

// --- sum and mean ---------------------------------------------------------------

template <typename S>
__global__ void sum_kernel(ReduceCall c) {
  using T = Stored<S>;
  using Acc = typename T::C;
  const S* x = static_cast<const S*>(c.in);
  S* y = static_cast<S*>(c.out);
  for (int64_t o = blockIdx.x; o < c.outer.numel; o += gridDim.x) {
    int64_t at[MapGeometry::kMaxOperands] = {o, o, o};
    if (!c.outer.flat) map_offsets(c.outer, o, at);
    Acc acc = 0;
    for (int64_t r = threadIdx.x; r < c.inner.numel; r += blockDim.x) {
      int64_t in[MapGeometry::kMaxOperands] = {r, r, r};
      if (!c.inner.flat) map_offsets(c.inner, r, in);
      acc += T::load(x + at[1] + in[0]);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) T::store(y + at[0], static_cast<Acc>(acc * static_cast<Acc>(c.scale)));
  }
}

// --- cross entropy ---------------------------------------------------------------

// Row i's log-sum-exp and, with smoothing, sum_k w_k (x_k - lse); in every thread.
template <typename S>
__device__ void row_stats(const CrossEntropyCall& c, const S* row, const S* weight, double* lse, double* smooth_sum) {
  using T = Stored<S>;
  double m = -INFINITY;
  for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) m = fmax(m, static_cast<double>(T::load(row + k)));
  m = block_max(m);
  double s = 0;
  for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) s += exp(static_cast<double>(T::load(row + k)) - m);
  *lse = m + log(block_sum(s));
  *smooth_sum = 0;
  if (c.smoothing > 0) {
    double acc = 0;
    for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x)
      acc += (weight ? static_cast<double>(T::load(weight + k)) : 1.0) * (static_cast<double>(T::load(row + k)) - *lse);
    *smooth_sum = block_sum(acc);
  }
}

// Per row: the loss (0 where ignored, NaN for a bad target) and the weight
// the mean divides by.
template <typename S>
__global__ void cross_entropy_rows(CrossEntropyCall c, S* none_out) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.x);
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t i = blockIdx.x; i < c.n; i += gridDim.x) {
    const int64_t t = c.target[i];
    const S* row = x + i * c.c;
    double lse = 0, smooth_sum = 0;
    row_stats(c, row, w, &lse, &smooth_sum);
    if (threadIdx.x != 0) continue;
    double loss = 0, weight = 0;
    if (t != c.ignore) {
      if (t < 0 || t >= c.c) {
        loss = NAN;
      } else {
        weight = w ? static_cast<double>(T::load(w + t)) : 1.0;
        loss = -(1 - c.smoothing) * weight * (static_cast<double>(T::load(row + t)) - lse) -
               c.smoothing / static_cast<double>(c.c) * smooth_sum;
      }
    }
    c.scratch[i] = loss;
    c.scratch[c.n + i] = weight;
    if (none_out) T::store(none_out + i, static_cast<typename T::C>(loss));
  }
}

// scratch[2n] = the mean's denominator; out[0] = the sum or mean of the losses.
template <typename S>
__global__ void cross_entropy_total(CrossEntropyCall c, S* out) {
  double loss = 0, weight = 0;
  for (int64_t i = threadIdx.x; i < c.n; i += blockDim.x) {
    loss += c.scratch[i];
    weight += c.scratch[c.n + i];
  }
  loss = block_sum(loss);
  weight = block_sum(weight);
  if (threadIdx.x != 0) return;
  c.scratch[2 * c.n] = weight;
  if (out)
    Stored<S>::store(out, static_cast<typename Stored<S>::C>(c.reduction == Reduction::Sum ? loss : loss / weight));
}

// grad_x[i, k] = scale_i (total_i softmax_ik - coeff_ik), where coeff is the
// target's weight (1 - smoothing) plus smoothing / c of every class's.
template <typename S>
__global__ void cross_entropy_backward_rows(CrossEntropyCall c, const S* grad, S* grad_x) {
  using T = Stored<S>;
  const S* x = static_cast<const S*>(c.x);
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t i = blockIdx.x; i < c.n; i += gridDim.x) {
    const int64_t t = c.target[i];
    S* out = grad_x + i * c.c;
    if (t == c.ignore || t < 0 || t >= c.c) {
      const typename T::C fill = t == c.ignore ? 0 : NAN;
      for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) T::store(out + k, fill);
      continue;
    }
    const S* row = x + i * c.c;
    double lse = 0, unused = 0;
    row_stats(c, row, static_cast<const S*>(nullptr), &lse, &unused);
    const double g = static_cast<double>(T::load(grad + (c.reduction == Reduction::None ? i : 0)));
    const double scale = c.reduction == Reduction::Mean ? g / c.scratch[2 * c.n] : g;
    const double w_t = w ? static_cast<double>(T::load(w + t)) : 1.0;
    double weights = 0;  // sum_k w_k, for the smoothing's share
    if (c.smoothing > 0) {
      double acc = 0;
      for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) acc += w ? static_cast<double>(T::load(w + k)) : 1.0;
      weights = block_sum(acc);
    }
    const double share = c.smoothing / static_cast<double>(c.c);
    const double total = (1 - c.smoothing) * w_t + share * weights;
    for (int64_t k = threadIdx.x; k < c.c; k += blockDim.x) {
      const double w_k = w ? static_cast<double>(T::load(w + k)) : 1.0;
      const double coeff = share * w_k + (k == t ? (1 - c.smoothing) * w_t : 0.0);
      const double softmax = exp(static_cast<double>(T::load(row + k)) - lse);
      T::store(out + k, static_cast<typename T::C>(scale * (total * softmax - coeff)));
    }
  }
}

// --- SGD ---------------------------------------------------------------------------

template <typename S>
__global__ void sgd_kernel(SgdCall c) {
  if (c.loss) {
    const double l = c.loss_f64 ? *static_cast<const double*>(c.loss) : *static_cast<const float*>(c.loss);
    if (!isfinite(l)) return;
  }
  S* p = static_cast<S*>(c.param);
  const S* g = static_cast<const S*>(c.grad);
  S* buf = static_cast<S*>(c.buffer);
  const S neg_lr = static_cast<S>(-*c.lr), m = static_cast<S>(c.momentum), wd = static_cast<S>(c.weight_decay);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const S d = g[i] + p[i] * wd;
    if (!buf) {
      p[i] = p[i] + d * neg_lr;
      continue;
    }
    const S nb = buf[i] * m + d;
    buf[i] = nb;
    p[i] = p[i] + (c.nesterov ? d + nb * m : nb) * neg_lr;
  }
}

// --- softmax ------------------------------------------------------------------------

template <typename S>
__global__ void softmax_kernel(SoftmaxCall c) {
  using T = Stored<S>;
  using C = typename T::C;
  const S* x = static_cast<const S*>(c.x);
  S* y = static_cast<S*>(c.y);
  for (int64_t r = blockIdx.x; r < c.outer * c.inner; r += gridDim.x) {
    const int64_t base = r / c.inner * c.n * c.inner + r % c.inner;
    const int64_t seen = c.causal_rows > 0 ? std::min<int64_t>(r % c.causal_rows + 1, c.n) : c.n;
    C m = -INFINITY;
    for (int64_t k = threadIdx.x; k < seen; k += blockDim.x) m = max(m, T::load(x + base + k * c.inner));
    m = block_max(m);
    const bool blind = c.zero_blind_rows && m == C(-INFINITY);
    C total = 0;
    if (!blind)
      for (int64_t k = threadIdx.x; k < seen; k += blockDim.x) total += exp(T::load(x + base + k * c.inner) - m);
    total = block_sum(total);
    const C log_total = log(total);
    for (int64_t k = threadIdx.x; k < c.n; k += blockDim.x) {
      const C v = T::load(x + base + k * c.inner) - m;
      C out = c.log ? v - log_total : exp(v) / total;
      if (k >= seen || blind) out = c.log ? C(-INFINITY) : C(0);
      T::store(y + base + k * c.inner, out);
    }
  }
}

template <typename S>
void softmax_as(const SoftmaxCall& call) {
  softmax_kernel<S><<<grid_for(call.outer * call.inner), kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  check_launch(call.log ? "log_softmax" : "softmax");
}

// --- layer norm ---------------------------------------------------------------------

template <typename S>
__global__ void layer_norm_kernel(LayerNormCall c, const S* x, S* y, S* mean_out, S* rstd_out) {
  const S* w = static_cast<const S*>(c.weight);
  const S* b = static_cast<const S*>(c.bias);
  for (int64_t r = blockIdx.x; r < c.rows; r += gridDim.x) {
    const S* row = x + r * c.m;
    double s = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) s += row[k];
    const double mean = block_sum(s) / static_cast<double>(c.m);
    double ss = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) ss += (row[k] - mean) * (row[k] - mean);
    const double rstd = 1.0 / sqrt(block_sum(ss) / static_cast<double>(c.m) + c.eps);
    const S mu = static_cast<S>(mean), rs = static_cast<S>(rstd);
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      S v = (row[k] - mu) * rs;
      if (w) v *= w[k];
      if (b) v += b[k];
      y[r * c.m + k] = v;
    }
    if (threadIdx.x == 0) {
      mean_out[r] = mu;
      rstd_out[r] = rs;
    }
  }
}

// Per row: gx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g w.
template <typename S>
__global__ void layer_norm_input_grad_kernel(LayerNormCall c, const S* g, const S* x, const S* mean, const S* rstd,
                                             S* gx) {
  const S* w = static_cast<const S*>(c.weight);
  for (int64_t r = blockIdx.x; r < c.rows; r += gridDim.x) {
    const S* gr = g + r * c.m;
    const S* xr = x + r * c.m;
    const S mu = mean[r], rs = rstd[r];
    S s1 = 0, s2 = 0;
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      const S gh = w ? gr[k] * w[k] : gr[k];
      s1 += gh;
      s2 += gh * ((xr[k] - mu) * rs);
    }
    const S k1 = block_sum(s1) / static_cast<S>(c.m), k2 = block_sum(s2) / static_cast<S>(c.m);
    for (int64_t k = threadIdx.x; k < c.m; k += blockDim.x) {
      const S gh = w ? gr[k] * w[k] : gr[k];
      gx[r * c.m + k] = rs * (gh - k1 - (xr[k] - mu) * rs * k2);
    }
  }
}

// Per column j: gw = sum over rows of g xhat, gb = sum of g (in double).
template <typename S>
__global__ void layer_norm_param_grad_kernel(LayerNormCall c, const S* g, const S* x, const S* mean, const S* rstd,
                                             S* gw, S* gb) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < c.m; j += step) {
    double aw = 0, ab = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const S gv = g[r * c.m + j];
      aw += static_cast<double>(gv * ((x[r * c.m + j] - mean[r]) * rstd[r]));
      ab += static_cast<double>(gv);
    }
    gw[j] = static_cast<S>(aw);
    gb[j] = static_cast<S>(ab);
  }
}

template <typename S>
void layer_norm_as(const LayerNormCall& c, const void* x, void* y, void* mean, void* rstd) {
  layer_norm_kernel<S><<<grid_for(c.rows), kThreads, 0, static_cast<cudaStream_t>(c.stream)>>>(
      c, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mean), static_cast<S*>(rstd));
  check_launch("layer_norm");
}

template <typename S>
void layer_norm_backward_as(const LayerNormCall& c, const void* g, const void* x, const void* mean, const void* rstd,
                            void* gx, void* gw, void* gb) {
  const auto stream = static_cast<cudaStream_t>(c.stream);
  layer_norm_input_grad_kernel<S><<<grid_for(c.rows), kThreads, 0, stream>>>(
      c, static_cast<const S*>(g), static_cast<const S*>(x), static_cast<const S*>(mean), static_cast<const S*>(rstd),
      static_cast<S*>(gx));
  check_launch("layer_norm_backward");
  layer_norm_param_grad_kernel<S><<<grid_for((c.m + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      c, static_cast<const S*>(g), static_cast<const S*>(x), static_cast<const S*>(mean), static_cast<const S*>(rstd),
      static_cast<S*>(gw), static_cast<S*>(gb));
  check_launch("layer_norm_backward");
}

// --- batch norm ---------------------------------------------------------------------

// Element j of channel ch: image j / inner, position j % inner.
__device__ inline int64_t channel_at(const BatchNormCall& c, int64_t ch, int64_t j) {
  return (j / c.inner * c.c + ch) * c.inner + j % c.inner;
}

template <typename S>
__global__ void batch_norm_kernel(BatchNormCall c, const S* x, S* y, S* mean_out, S* rstd_out) {
  const S* w = static_cast<const S*>(c.weight);
  const S* b = static_cast<const S*>(c.bias);
  S* rm = static_cast<S*>(c.running_mean);
  S* rv = static_cast<S*>(c.running_var);
  const int64_t count = c.n * c.inner;
  for (int64_t ch = blockIdx.x; ch < c.c; ch += gridDim.x) {
    double mean, var;
    if (c.training) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += x[channel_at(c, ch, j)];
      mean = block_sum(s) / static_cast<double>(count);
      double ss = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
        const double d = x[channel_at(c, ch, j)] - mean;
        ss += d * d;
      }
      ss = block_sum(ss);
      var = ss / static_cast<double>(count);
      if (rm && rv && threadIdx.x == 0) {
        S& m = rm[ch * c.running_stride[0]];
        S& v = rv[ch * c.running_stride[1]];
        m = static_cast<S>((1 - c.momentum) * m + c.momentum * mean);
        v = static_cast<S>((1 - c.momentum) * v + c.momentum * ss / static_cast<double>(count - 1));
      }
    } else {
      mean = rm[ch * c.running_stride[0]];
      var = rv[ch * c.running_stride[1]];
    }
    const double rstd = 1.0 / sqrt(var + c.eps), scale = w ? static_cast<double>(w[ch]) : 1.0;
    if (threadIdx.x == 0) {
      mean_out[ch] = static_cast<S>(mean);
      rstd_out[ch] = static_cast<S>(rstd);
    }
    const S k = static_cast<S>(rstd * scale),
            shift = static_cast<S>((b ? static_cast<double>(b[ch]) : 0.0) - mean * rstd * scale);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      y[at] = x[at] * k + shift;
    }
  }
}

// gb = sum g, gw = rstd sum g (x - mean); gx = w rstd (g - mean(g) - xhat
// mean(g xhat)) in training, w rstd g in eval.
template <typename S>
__global__ void batch_norm_backward_kernel(BatchNormCall c, const S* g, const S* x, const S* mean, const S* rstd, S* gx,
                                           S* gw, S* gb) {
  const S* w = static_cast<const S*>(c.weight);
  const int64_t count = c.n * c.inner;
  for (int64_t ch = blockIdx.x; ch < c.c; ch += gridDim.x) {
    const double mu = mean[ch], rs = rstd[ch], scale = w ? static_cast<double>(w[ch]) : 1.0;
    double sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      sg += g[at];
      sgx += static_cast<double>(g[at]) * (static_cast<double>(x[at]) - mu);
    }
    sg = block_sum(sg);
    sgx = block_sum(sgx);
    if (threadIdx.x == 0) {
      gb[ch] = static_cast<S>(sg);
      gw[ch] = static_cast<S>(sgx * rs);
    }
    const S k1 = static_cast<S>(scale * rs);
    const S k2 = static_cast<S>(c.training ? sg / static_cast<double>(count) : 0.0);
    const S k3 = static_cast<S>(c.training ? rs * rs * sgx / static_cast<double>(count) : 0.0);
    const S m = static_cast<S>(mu);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t at = channel_at(c, ch, j);
      gx[at] = k1 * (g[at] - k2 - (x[at] - m) * k3);
    }
  }
}

template <typename S>
void batch_norm_as(const BatchNormCall& c, const void* x, void* y, void* mean, void* rstd) {
  batch_norm_kernel<S><<<grid_for(c.c), kThreads, 0, static_cast<cudaStream_t>(c.stream)>>>(
      c, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mean), static_cast<S*>(rstd));
  check_launch("batch_norm");
}

template <typename S>
void batch_norm_backward_as(const BatchNormCall& c, const void* g, const void* x, const void* mean, const void* rstd,
                            void* gx, void* gw, void* gb) {
  batch_norm_backward_kernel<S><<<grid_for(c.c), kThreads, 0, static_cast<cudaStream_t>(c.stream)>>>(
      c, static_cast<const S*>(g), static_cast<const S*>(x), static_cast<const S*>(mean), static_cast<const S*>(rstd),
      static_cast<S*>(gx), static_cast<S*>(gw), static_cast<S*>(gb));
  check_launch("batch_norm_backward");
}

// --- dropout ------------------------------------------------------------------------

template <typename S>
__global__ void dropout_kernel(DropoutCall c, const S* x, S* y, S* mask) {
  const S scale = static_cast<S>(1.0 / (1.0 - c.p));
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += step) {
    const S m = philox::keeps(c.seed, c.first, static_cast<uint64_t>(i), 1.0 - c.p) ? scale : S(0);
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

template <typename S>
void dropout_as(const DropoutCall& c, const void* x, void* y, void* mask) {
  dropout_kernel<S><<<grid_for((c.n + kThreads - 1) / kThreads), kThreads, 0, static_cast<cudaStream_t>(c.stream)>>>(
      c, static_cast<const S*>(x), static_cast<S*>(y), static_cast<S*>(mask));
  check_launch("dropout");
}

// --- embedding -----------------------------------------------------------------------

__device__ inline int64_t table_row(int64_t index, int64_t rows) { return index < 0 ? index + rows : index; }

template <typename S>
__global__ void embedding_kernel(EmbeddingCall c, const S* table, const int64_t* indices, S* out) {
  const int64_t total = c.count * c.dim, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t r = table_row(indices[e / c.dim], c.rows);
    if (r < 0 || r >= c.rows) {
      Stored<S>::store(out + e, NAN);
      continue;
    }
    out[e] = table[r * c.dim + e % c.dim];
  }
}

template <typename S>
__global__ void embedding_backward_kernel(EmbeddingCall c, const S* g, const int64_t* indices, S* gt) {
  const int64_t total = c.count * c.dim, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t r = table_row(indices[e / c.dim], c.rows);
    if (r < 0 || r >= c.rows || r == c.padding_idx) continue;
    atomicAdd(gt + r * c.dim + e % c.dim, g[e]);  // (an index may repeat)
  }
}

template <typename S>
void embedding_as(const EmbeddingCall& c, const void* table, const int64_t* indices, void* out) {
  embedding_kernel<S>
      <<<grid_for((c.count * c.dim + kThreads - 1) / kThreads), kThreads, 0, static_cast<cudaStream_t>(c.stream)>>>(
          c, static_cast<const S*>(table), indices, static_cast<S*>(out));
  check_launch("embedding");
}

template <typename S>
void embedding_backward_as(const EmbeddingCall& c, const void* g, const int64_t* indices, void* gt) {
  const auto stream = static_cast<cudaStream_t>(c.stream);
  const cudaError_t zeroed = cudaMemsetAsync(gt, 0, static_cast<size_t>(c.rows * c.dim) * sizeof(S), stream);
  if (zeroed != cudaSuccess) KILN_FAIL("CUDA: cudaMemsetAsync failed: ", cudaGetErrorString(zeroed));
  if (c.count * c.dim == 0) return;
  embedding_backward_kernel<S><<<grid_for((c.count * c.dim + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      c, static_cast<const S*>(g), indices, static_cast<S*>(gt));
  check_launch("embedding_backward");
}

// --- max pooling ----------------------------------------------------------------------

template <typename S>
__global__ void max_pool_kernel(PoolCall c, const S* x, S* y, int64_t* indices) {
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow), oy = i / c.ow % c.oh, ox = i % c.ow;
    const S* src = x + plane * c.h * c.w;
    int64_t best = -1;
    S value = -INFINITY;
    for (int64_t a = 0; a < c.kh; ++a) {
      const int64_t iy = oy * c.sh - c.ph + a * c.dh;
      if (iy < 0 || iy >= c.h) continue;
      for (int64_t b = 0; b < c.kw; ++b) {
        const int64_t ix = ox * c.sw - c.pw + b * c.dw;
        if (ix < 0 || ix >= c.w) continue;
        const S v = src[iy * c.w + ix];
        if (best < 0 || v > value || (v != v && value == value)) {
          value = v;
          best = iy * c.w + ix;
        }
      }
    }
    y[i] = value;
    indices[i] = best;
  }
}

template <typename S>
__global__ void max_pool_backward_kernel(PoolCall c, const S* g, const int64_t* indices, const S* mask, S* gx) {
  const int64_t per_plane = c.oh * c.ow, total = c.planes * per_plane;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t at = indices[i];
    if (at < 0) continue;
    const int64_t to = i / per_plane * c.h * c.w + at;
    if (mask && !(mask[to] > S(0))) continue;
    atomicAdd(gx + to, g[i]);  // (overlapping windows may share a maximum)
  }
}

// Output (plane, oy, ox)'s window: rows [y0, y1), columns [x0, x1).
struct Window {
  int64_t y0, y1, x0, x1;
};
__device__ inline Window adaptive_window(const PoolCall& c, int64_t oy, int64_t ox) {
  return {oy * c.h / c.oh, ((oy + 1) * c.h + c.oh - 1) / c.oh, ox * c.w / c.ow, ((ox + 1) * c.w + c.ow - 1) / c.ow};
}

template <typename S>
__global__ void adaptive_avg_pool_kernel(PoolCall c, const S* x, S* y, bool backward) {
  const int64_t total = c.planes * c.oh * c.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t plane = i / (c.oh * c.ow);
    const Window wd = adaptive_window(c, i / c.ow % c.oh, i % c.ow);
    const S count = static_cast<S>((wd.y1 - wd.y0) * (wd.x1 - wd.x0));
    if (backward) {  // x is the output's gradient, y the input's (zeroed first)
      const S share = x[i] / count;
      for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
        for (int64_t ix = wd.x0; ix < wd.x1; ++ix) atomicAdd(y + plane * c.h * c.w + iy * c.w + ix, share);
      continue;
    }
    S acc = 0;
    for (int64_t iy = wd.y0; iy < wd.y1; ++iy)
      for (int64_t ix = wd.x0; ix < wd.x1; ++ix) acc += x[plane * c.h * c.w + iy * c.w + ix];
    y[i] = acc / count;
  }
}

template <typename S>
void adaptive_avg_pool_as(const PoolCall& call, const void* in, void* out, bool backward) {
  const auto stream = static_cast<cudaStream_t>(call.stream);
  if (backward) {
    const cudaError_t zeroed =
        cudaMemsetAsync(out, 0, static_cast<size_t>(call.planes * call.h * call.w) * sizeof(S), stream);
    if (zeroed != cudaSuccess) KILN_FAIL("CUDA: cudaMemsetAsync failed: ", cudaGetErrorString(zeroed));
  }
  const int64_t total = call.planes * call.oh * call.ow;
  if (total == 0) return;
  adaptive_avg_pool_kernel<S><<<grid_for((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      call, static_cast<const S*>(in), static_cast<S*>(out), backward);
  check_launch(backward ? "adaptive_avg_pool2d_backward" : "adaptive_avg_pool2d");
}

template <typename S>
void max_pool_as(const PoolCall& call, const void* x, void* y, int64_t* indices) {
  const int64_t total = call.planes * call.oh * call.ow;
  max_pool_kernel<S>
      <<<grid_for((total + kThreads - 1) / kThreads), kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(
          call, static_cast<const S*>(x), static_cast<S*>(y), indices);
  check_launch("max_pool2d");
}

template <typename S>
void max_pool_backward_as(const PoolCall& call, const void* g, const int64_t* indices, const void* mask, void* gx) {
  const auto stream = static_cast<cudaStream_t>(call.stream);
  const int64_t total = call.planes * call.oh * call.ow;
  const cudaError_t zeroed =
      cudaMemsetAsync(gx, 0, static_cast<size_t>(call.planes * call.h * call.w) * sizeof(S), stream);
  if (zeroed != cudaSuccess) KILN_FAIL("CUDA: cudaMemsetAsync failed: ", cudaGetErrorString(zeroed));
  max_pool_backward_kernel<S><<<grid_for((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      call, static_cast<const S*>(g), indices, static_cast<const S*>(mask), static_cast<S*>(gx));
  check_launch("max_pool2d_backward");
}

template <typename S>
__global__ void adam_kernel(AdamCall c) {
  if (c.loss) {
    const double l = c.loss_f64 ? *static_cast<const double*>(c.loss) : *static_cast<const float*>(c.loss);
    if (!isfinite(l)) return;
  }
  S* p = static_cast<S*>(c.param);
  const S* g = static_cast<const S*>(c.grad);
  S* m = static_cast<S*>(c.exp_avg);
  S* v = static_cast<S*>(c.exp_avg_sq);
  const double lr = *c.lr, step = *c.step;
  const S b1 = static_cast<S>(c.beta1), b2 = static_cast<S>(c.beta2), one_b1 = static_cast<S>(1 - c.beta1),
          one_b2 = static_cast<S>(1 - c.beta2), eps = static_cast<S>(c.eps);
  const S bc2 = static_cast<S>(1 - pow(c.beta2, step));
  const S step_size = static_cast<S>(-lr / (1 - pow(c.beta1, step)));
  const S decay = static_cast<S>(1 - lr * c.weight_decay), l2 = static_cast<S>(c.weight_decay);
  const bool decays = c.weight_decay != 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < c.n; i += stride) {
    if (c.decoupled && decays) p[i] = p[i] * decay;
    const S d = (!c.decoupled && decays) ? g[i] + p[i] * l2 : g[i];
    m[i] = m[i] * b1 + d * one_b1;
    v[i] = v[i] * b2 + d * d * one_b2;
    p[i] = p[i] + m[i] / (sqrt(v[i] / bc2) + eps) * step_size;
  }
}

template <typename S>
void sum_as(const ReduceCall& call) {
  sum_kernel<S><<<grid_for(call.outer.numel), kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  check_launch("sum");
}

template <typename S>
void cross_entropy_as(const CrossEntropyCall& call, void* out) {
  const auto stream = static_cast<cudaStream_t>(call.stream);
  S* none_out = call.reduction == Reduction::None ? static_cast<S*>(out) : nullptr;
  cross_entropy_rows<S><<<grid_for(call.n), kThreads, 0, stream>>>(call, none_out);
  check_launch("cross_entropy");
  if (call.reduction == Reduction::None) return;
  cross_entropy_total<S><<<1, kThreads, 0, stream>>>(call, static_cast<S*>(out));
  check_launch("cross_entropy");
}

template <typename S>
void cross_entropy_backward_as(const CrossEntropyCall& call, const void* grad, void* grad_x) {
  const auto stream = static_cast<cudaStream_t>(call.stream);
  if (call.reduction == Reduction::Mean) {  // the denominator first: sum of the kept targets' weights
    cross_entropy_rows<S><<<grid_for(call.n), kThreads, 0, stream>>>(call, nullptr);
    check_launch("cross_entropy_backward");
    cross_entropy_total<S><<<1, kThreads, 0, stream>>>(call, nullptr);
    check_launch("cross_entropy_backward");
  }
  cross_entropy_backward_rows<S>
      <<<grid_for(call.n), kThreads, 0, stream>>>(call, static_cast<const S*>(grad), static_cast<S*>(grad_x));
  check_launch("cross_entropy_backward");
}

}  // namespace

void launch_sum(const ReduceCall& call) {
  if (call.outer.numel == 0) return;
  switch (call.dtype) {
    case MapDType::Float32:
      return sum_as<float>(call);
    case MapDType::Float64:
      return sum_as<double>(call);
    case MapDType::Float16:
      return sum_as<__half>(call);
    case MapDType::BFloat16:
      return sum_as<__nv_bfloat16>(call);
  }
}

void launch_cross_entropy(const CrossEntropyCall& call, void* out) {
  KILN_CHECK(call.dtype == MapDType::Float32 || call.dtype == MapDType::Float64,
             "CUDA cross_entropy: float32 or float64");
  if (call.dtype == MapDType::Float64) return cross_entropy_as<double>(call, out);
  cross_entropy_as<float>(call, out);
}

void launch_cross_entropy_backward(const CrossEntropyCall& call, const void* grad, void* grad_x) {
  KILN_CHECK(call.dtype == MapDType::Float32 || call.dtype == MapDType::Float64,
             "CUDA cross_entropy: float32 or float64");
  if (call.n == 0) return;
  if (call.dtype == MapDType::Float64) return cross_entropy_backward_as<double>(call, grad, grad_x);
  cross_entropy_backward_as<float>(call, grad, grad_x);
}

void launch_sgd_update(const SgdCall& call) {
  if (call.n == 0) return;
  const auto blocks = grid_for((call.n + kThreads - 1) / kThreads);
  if (call.dtype == MapDType::Float64) {
    sgd_kernel<double><<<blocks, kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  } else {
    sgd_kernel<float><<<blocks, kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  }
  check_launch("sgd_update");
}

void launch_max_pool2d(const PoolCall& call, const void* x, void* y, int64_t* indices) {
  if (call.planes * call.oh * call.ow == 0) return;
  if (call.dtype == MapDType::Float64) return max_pool_as<double>(call, x, y, indices);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA max_pool2d: float32 or float64");
  max_pool_as<float>(call, x, y, indices);
}

void launch_max_pool2d_backward(const PoolCall& call, const void* grad_y, const int64_t* indices, const void* mask,
                                void* grad_x) {
  if (call.planes * call.h * call.w == 0) return;
  if (call.dtype == MapDType::Float64) return max_pool_backward_as<double>(call, grad_y, indices, mask, grad_x);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA max_pool2d_backward: float32 or float64");
  max_pool_backward_as<float>(call, grad_y, indices, mask, grad_x);
}

void launch_softmax(const SoftmaxCall& call) {
  if (call.outer * call.n * call.inner == 0) return;
  switch (call.dtype) {
    case MapDType::Float32:
      return softmax_as<float>(call);
    case MapDType::Float64:
      return softmax_as<double>(call);
    case MapDType::Float16:
      return softmax_as<__half>(call);
    case MapDType::BFloat16:
      return softmax_as<__nv_bfloat16>(call);
  }
}

void launch_layer_norm(const LayerNormCall& call, const void* x, void* y, void* mean, void* rstd) {
  if (call.rows == 0 || call.m == 0) return;
  if (call.dtype == MapDType::Float64) return layer_norm_as<double>(call, x, y, mean, rstd);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA layer_norm: float32 or float64");
  layer_norm_as<float>(call, x, y, mean, rstd);
}

void launch_layer_norm_backward(const LayerNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias) {
  if (call.rows == 0 || call.m == 0) return;
  if (call.dtype == MapDType::Float64)
    return layer_norm_backward_as<double>(call, grad, x, mean, rstd, grad_x, grad_weight, grad_bias);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA layer_norm_backward: float32 or float64");
  layer_norm_backward_as<float>(call, grad, x, mean, rstd, grad_x, grad_weight, grad_bias);
}

void launch_embedding(const EmbeddingCall& call, const void* table, const int64_t* indices, void* out) {
  if (call.count * call.dim == 0) return;
  switch (call.dtype) {
    case MapDType::Float32:
      return embedding_as<float>(call, table, indices, out);
    case MapDType::Float64:
      return embedding_as<double>(call, table, indices, out);
    case MapDType::Float16:
      return embedding_as<__half>(call, table, indices, out);
    case MapDType::BFloat16:
      return embedding_as<__nv_bfloat16>(call, table, indices, out);
  }
}

void launch_embedding_backward(const EmbeddingCall& call, const void* grad, const int64_t* indices, void* grad_table) {
  if (call.rows * call.dim == 0) return;
  if (call.dtype == MapDType::Float64) return embedding_backward_as<double>(call, grad, indices, grad_table);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA embedding_backward: float32 or float64");
  embedding_backward_as<float>(call, grad, indices, grad_table);
}

void launch_adam_update(const AdamCall& call) {
  if (call.n == 0) return;
  const auto blocks = grid_for((call.n + kThreads - 1) / kThreads);
  if (call.dtype == MapDType::Float64) {
    adam_kernel<double><<<blocks, kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  } else {
    KILN_CHECK(call.dtype == MapDType::Float32, "CUDA adam_update: float32 or float64");
    adam_kernel<float><<<blocks, kThreads, 0, static_cast<cudaStream_t>(call.stream)>>>(call);
  }
  check_launch("adam_update");
}

void launch_batch_norm(const BatchNormCall& call, const void* x, void* y, void* mean, void* rstd) {
  if (call.c == 0) return;
  if (call.dtype == MapDType::Float64) return batch_norm_as<double>(call, x, y, mean, rstd);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA batch_norm: float32 or float64");
  batch_norm_as<float>(call, x, y, mean, rstd);
}

void launch_batch_norm_backward(const BatchNormCall& call, const void* grad, const void* x, const void* mean,
                                const void* rstd, void* grad_x, void* grad_weight, void* grad_bias) {
  if (call.c == 0) return;
  if (call.dtype == MapDType::Float64)
    return batch_norm_backward_as<double>(call, grad, x, mean, rstd, grad_x, grad_weight, grad_bias);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA batch_norm_backward: float32 or float64");
  batch_norm_backward_as<float>(call, grad, x, mean, rstd, grad_x, grad_weight, grad_bias);
}

void launch_adaptive_avg_pool2d(const PoolCall& call, const void* x, void* y) {
  if (call.dtype == MapDType::Float64) return adaptive_avg_pool_as<double>(call, x, y, false);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA adaptive_avg_pool2d: float32 or float64");
  adaptive_avg_pool_as<float>(call, x, y, false);
}

void launch_adaptive_avg_pool2d_backward(const PoolCall& call, const void* grad_y, void* grad_x) {
  if (call.dtype == MapDType::Float64) return adaptive_avg_pool_as<double>(call, grad_y, grad_x, true);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA adaptive_avg_pool2d_backward: float32 or float64");
  adaptive_avg_pool_as<float>(call, grad_y, grad_x, true);
}

void launch_dropout(const DropoutCall& call, const void* x, void* y, void* mask) {
  if (call.n == 0) return;
  if (call.dtype == MapDType::Float64) return dropout_as<double>(call, x, y, mask);
  KILN_CHECK(call.dtype == MapDType::Float32, "CUDA dropout: float32 or float64");
  dropout_as<float>(call, x, y, mask);
}

}  // namespace kiln::cuda

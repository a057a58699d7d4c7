// Embedding and its backward on CUDA: rows of a table by int64 indices, and
// gradient rows added back atomically (an index may repeat).
#include "backends/cuda/kernel_launch.h"
#include "backends/cuda/training_launch.h"

namespace kiln::cuda {
namespace {

__device__ inline int64_t table_row(int64_t index, int64_t rows) { return index < 0 ? index + rows : index; }

template <typename S>
__global__ void embedding_kernel(EmbeddingCall c, const S* table, const int64_t* indices, S* out) {
  const int64_t total = c.count * c.dim, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += step) {
    const int64_t r = table_row(indices[e / c.dim], c.rows);
    if (r < 0 || r >= c.rows) {
      if (e % c.dim == 0) report_bad_index(c.error, IndexKind::Embedding, indices[e / c.dim], e / c.dim, c.rows);
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

}  // namespace

void launch_embedding(const EmbeddingCall& call, const void* table, const int64_t* indices, void* out) {
  if (call.count * call.dim == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    embedding_kernel<S><<<blocks_for(call.count * call.dim), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(table), indices, static_cast<S*>(out));
  });
  check_launch("embedding");
}

void launch_embedding_backward(const EmbeddingCall& call, const void* grad, const int64_t* indices, void* grad_table) {
  if (call.rows * call.dim == 0) return;
  with_float_or_double(call.dtype, "embedding_backward", [&](auto s) {
    using S = decltype(s);
    zero(grad_table, static_cast<size_t>(call.rows * call.dim) * sizeof(S), call.stream);
    if (call.count * call.dim == 0) return;
    embedding_backward_kernel<S><<<blocks_for(call.count * call.dim), kThreads, 0, stream_of(call.stream)>>>(
        call, static_cast<const S*>(grad), indices, static_cast<S*>(grad_table));
    check_launch("embedding_backward");
  });
}

}  // namespace kiln::cuda

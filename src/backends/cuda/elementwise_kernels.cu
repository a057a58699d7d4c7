// Every elementwise formula (src/ops/elementwise_formulas.h) as a CUDA
// kernel: the functor the CPU runs, built on the host from the op's
// attributes and copied to the device by value. One thread per output
// element in a grid-stride loop; float16 and bfloat16 load into float,
// compute there and round once on the store, as the CPU does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backends/cuda/elementwise_launch.h"
#include "backends/cuda/kernel_launch.h"
#include "ops/elementwise_formulas.h"

namespace kiln::cuda {
namespace {

template <class F, typename S>
__global__ void map_kernel(F f, MapGeometry g, S* y, const S* a, const S* b) {
  using T = Stored<S>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    int64_t off[MapGeometry::kMaxOperands] = {i, i, i, i};
    if (!g.flat) map_offsets(g, i, off);
    if constexpr (F::kArity == 1) {
      T::store(y + off[0], f(T::load(a + off[1])));
    } else {
      T::store(y + off[0], f(T::load(a + off[1]), T::load(b + off[2])));
    }
  }
}

// Element moves of any dtype, as words of its size.
template <typename W>
__global__ void copy_kernel(MapGeometry g, W* y, const W* a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < g.numel; i += step) {
    int64_t off[MapGeometry::kMaxOperands] = {i, i, i, i};
    if (!g.flat) map_offsets(g, i, off);
    y[off[0]] = a[off[1]];
  }
}

template <typename W>
void copy_as(const MapCall& call) {
  copy_kernel<W><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
      call.geometry, static_cast<W*>(call.out), static_cast<const W*>(call.in[0]));
  check_launch("copy");
}

}  // namespace

void launch_copy(const MapCall& call, size_t element_size) {
  if (call.geometry.numel == 0) return;
  switch (element_size) {
    case 1:
      return copy_as<uint8_t>(call);
    case 2:
      return copy_as<uint16_t>(call);
    case 4:
      return copy_as<uint32_t>(call);
    case 8:
      return copy_as<uint64_t>(call);
    default:
      KILN_FAIL("CUDA copy: elements of ", element_size, " bytes");
  }
}

template <class F>
void launch_map(const F& f, const MapCall& call) {
  if (call.geometry.numel == 0) return;
  with_any_float(call.dtype, [&](auto s) {
    using S = decltype(s);
    map_kernel<F, S><<<blocks_for(call.geometry.numel), kThreads, 0, stream_of(call.stream)>>>(
        f, call.geometry, static_cast<S*>(call.out), static_cast<const S*>(call.in[0]),
        static_cast<const S*>(call.in[1]));
  });
  check_launch(F::kName);
}

#define KILN_INSTANTIATE_MAP(F) template void launch_map<formulas::F>(const formulas::F&, const MapCall&);
KILN_FORMULAS(KILN_INSTANTIATE_MAP)
#undef KILN_INSTANTIATE_MAP

}  // namespace kiln::cuda

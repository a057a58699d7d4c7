#pragma once
// The elementwise kernels' launches (elementwise_kernels.cu): formulas,
// instantiated there for every functor of KILN_FORMULAS (the op's formula as
// the CPU runs it, compiled for the GPU), and copies. Plain values and C++17, so that the CUDA
// compiler of Debian's toolkit takes it as the GPU machines' does.
#include <cstddef>

#include "backends/cuda/map_geometry.h"

namespace kiln::cuda {

// The storage types a formula runs over; the 16-bit ones compute in float.
enum class MapDType { Float32, Float64, Float16, BFloat16 };

struct MapCall {
  MapGeometry geometry;
  MapDType dtype = MapDType::Float32;
  void* out = nullptr;
  const void* in[3] = {nullptr, nullptr, nullptr};  // device addresses of the first elements
  void* stream = nullptr;                  // a cudaStream_t
};

// Queues y = f(a[, b]) on call.stream; throws with CUDA's reason if the
// launch fails.
template <class F>
void launch_map(const F& f, const MapCall& call);

// Queues a copy of call.in[0] into call.out, elements of `element_size`
// bytes (any dtype), in the layouts the geometry gives.
void launch_copy(const MapCall& call, size_t element_size);

}  // namespace kiln::cuda

#pragma once
// How an elementwise kernel addresses its operands: output element i, in
// row-major order over the output's shape, reads each input at the input's
// own strides, with stride 0 along the axes it broadcasts over. Axes that
// every operand walks as one run are merged first, so dense tensors of one
// shape address as a single flat axis and pay no index arithmetic.
// Plain values and C++17, shared by the host code that builds a geometry
// and the device code that walks it (and by the tests, on the host).
#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "kiln/error.h"

namespace kiln::cuda {

struct MapGeometry {
  static constexpr int kMaxRank = 8;
  static constexpr int kMaxOperands = 4;  // the output and up to three inputs
  int rank = 0;
  int operands = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};  // elements; operand 0 is the output
  bool flat = false;                             // every operand dense in the output's order: offset i for element i
};

// The element offset of output element i in every operand.
KILN_HOST_DEVICE inline void map_offsets(const MapGeometry& g, int64_t i, int64_t* offsets) {
  for (int k = 0; k < g.operands; ++k) offsets[k] = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t at = i % g.sizes[d];
    i /= g.sizes[d];
    for (int k = 0; k < g.operands; ++k) offsets[k] += at * g.strides[k][d];
  }
}

// The geometry of writing an output of `shape` with `strides[0]` while
// reading operands 1.. of shapes[k] and strides[k], which broadcast to it
// (aligned from the right; their size-1 axes repeat).
inline MapGeometry map_geometry(const std::vector<int64_t>& shape, const std::vector<std::vector<int64_t>>& shapes,
                                const std::vector<std::vector<int64_t>>& strides) {
  MapGeometry g;
  g.operands = static_cast<int>(strides.size());
  KILN_CHECK(g.operands >= 1 && g.operands <= MapGeometry::kMaxOperands && shapes.size() == strides.size(),
             "an elementwise kernel maps 1 to ", MapGeometry::kMaxOperands, " operands, not ", strides.size());
  g.numel = 1;
  for (int64_t s : shape) g.numel *= s;
  // Every operand's strides over the output's axes, dropping size-1 axes
  // (one position: any stride), then merging axis d into d+1 where every
  // operand steps over d as a whole run of d+1.
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> full(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    sizes.push_back(shape[d]);
    for (size_t k = 0; k < strides.size(); ++k) {
      const size_t skip = shape.size() - shapes[k].size();
      KILN_CHECK(shapes[k].size() <= shape.size() && shapes[k].size() == strides[k].size(), "operand ", k,
                 " has more axes than the output");
      const bool there = d >= skip && shapes[k][d - skip] != 1;
      full[k].push_back(there ? strides[k][d - skip] : 0);
    }
  }
  std::vector<int64_t> merged_sizes;
  std::vector<std::vector<int64_t>> merged(strides.size());
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool joins = !merged_sizes.empty();
    for (size_t k = 0; k < full.size() && joins; ++k) joins = merged[k].back() == full[k][d] * sizes[d];
    if (joins) {
      merged_sizes.back() *= sizes[d];
      for (size_t k = 0; k < full.size(); ++k) merged[k].back() = full[k][d];
      continue;
    }
    merged_sizes.push_back(sizes[d]);
    for (size_t k = 0; k < full.size(); ++k) merged[k].push_back(full[k][d]);
  }
  KILN_CHECK(merged_sizes.size() <= static_cast<size_t>(MapGeometry::kMaxRank), "an elementwise kernel on CUDA takes ",
             MapGeometry::kMaxRank, " axes after merging, and these operands have ", merged_sizes.size(),
             "; make them contiguous first (Tensor::contiguous)");
  g.rank = static_cast<int>(merged_sizes.size());
  g.flat = true;
  for (int d = 0; d < g.rank; ++d) {
    g.sizes[d] = merged_sizes[d];
    for (int k = 0; k < g.operands; ++k) {
      g.strides[k][d] = merged[k][d];
      g.flat = g.flat && g.rank == 1 && merged[k][d] == 1;
    }
  }
  return g;
}

}  // namespace kiln::cuda

#pragma once
// The geometry of ONNX's convolution and pooling nodes read onto Kiln's 2-d
// ops: per-axis pads from `pads` or `auto_pad`, ceil_mode's extra end
// padding, and 1-d nodes lifted to 2-d with a unit height.
#include <vector>

#include "kiln/functional.h"
#include "kiln/op_onnx.h"
#include "kiln/tensor.h"

namespace kiln::onnx_spatial {

// Padding of each spatial axis, begin and end.
struct Pads {
  std::vector<int64_t> begin, end;
  bool symmetric() const { return begin == end; }
};

Pads resolve_pads(const OnnxReader& n, const Shape& x, const std::vector<int64_t>& kernel,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation);
// x padded explicitly with `value` (Kiln's pad takes pairs from the last axis backwards).
Tensor pad_spatial(const Tensor& x, const Pads& p, double value);
// An attribute with one value per spatial axis.
std::vector<int64_t> spatial_attr(const OnnxReader& n, const char* name, size_t dims, int64_t fallback);

// 1-d ops run as 2-d ones with a unit height.
struct SpatialRank {
  bool one_d = false;
  Tensor lift(const Tensor& x) const { return one_d ? x.unsqueeze(2) : x; }
  Tensor lower(const Tensor& y) const { return one_d ? y.squeeze(2) : y; }
  std::vector<int64_t> lift(std::vector<int64_t> v, int64_t unit) const {
    if (one_d) v.insert(v.begin(), unit);
    return v;
  }
};
SpatialRank spatial_rank(const OnnxReader& n, const Tensor& x);

// A 1-d or 2-d Conv-like node (strides, dilations, pads or auto_pad, group)
// for input x and weights w as 2-d convolution options. Kiln's padding is
// symmetric: uneven pads come back as `border`, for the caller to add to the
// input explicitly (with the value that stands for zero), the options' padding then 0.
struct ConvGeometry {
  SpatialRank rank;
  ConvOptions options;
  bool has_border = false;
  Pads border;
};
ConvGeometry conv_geometry(const OnnxReader& n, const Tensor& x, const Tensor& w);

// Extra end padding so that ceil_mode's last, partial window exists (when
// the node sets ceil_mode).
void add_ceil_padding(const OnnxReader& n, const Shape& x, const std::vector<int64_t>& kernel,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation, Pads& p);

struct PoolGeometry {
  SpatialRank rank;
  std::vector<int64_t> kernel, stride, dilation;
  Pads pads;  // with ceil_mode's extra end padding
};
PoolGeometry pool_geometry(const OnnxReader& n, const Tensor& x);
// Pads that a pooling op takes as its own: symmetric, at most half the window.
bool pads_fit_kernel(const std::vector<int64_t>& kernel, const Pads& p);
// The sum of each window of an (already padded) [N, C, spatial...] input,
// any number of spatial axes: one strided slice per tap, added up.
Tensor window_sums(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& dilation);

}  // namespace kiln::onnx_spatial

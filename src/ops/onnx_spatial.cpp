#include "ops/onnx_spatial.h"

#include <algorithm>
#include <string>

#include "kiln/functional.h"

namespace kiln::onnx_spatial {

Pads resolve_pads(const OnnxReader& n, const Shape& x, const std::vector<int64_t>& kernel,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation) {
  const size_t dims = kernel.size();
  Pads p{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  const std::string auto_pad = n.s("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    auto pads = n.ints("pads", std::vector<int64_t>(2 * dims, 0));
    if (pads.size() != 2 * dims) n.fail("pads has ", pads.size(), " values; ", 2 * dims, " expected");
    for (size_t i = 0; i < dims; ++i) {
      p.begin[i] = pads[i];
      p.end[i] = pads[dims + i];
      if (p.begin[i] < 0 || p.end[i] < 0) n.unsupported("negative pads are not supported");
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < dims; ++i) {
      const int64_t in = x[2 + i], out = (in + stride[i] - 1) / stride[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in);
      p.begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.end[i] = total - p.begin[i];
    }
  } else if (auto_pad != "VALID") {
    n.fail("auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  return p;
}

Tensor pad_spatial(const Tensor& x, const Pads& p, double value) {
  std::vector<int64_t> pads;
  for (size_t i = p.begin.size(); i-- > 0;) {
    pads.push_back(p.begin[i]);
    pads.push_back(p.end[i]);
  }
  return pad(x, pads, "constant", value);
}

std::vector<int64_t> spatial_attr(const OnnxReader& n, const char* name, size_t dims, int64_t fallback) {
  auto v = n.ints(name, std::vector<int64_t>(dims, fallback));
  if (v.size() != dims) n.fail(name, " has ", v.size(), " values; ", dims, " expected");
  return v;
}

SpatialRank spatial_rank(const OnnxReader& n, const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4)
    n.unsupported("only 1-d and 2-d spatial inputs ([N, C, L] or [N, C, H, W]) are supported, got ", shape_str(x.shape()));
  return {x.dim() == 3};
}

ConvGeometry conv_geometry(const OnnxReader& n, const Tensor& x, const Tensor& w) {
  ConvGeometry g;
  g.rank = spatial_rank(n, x);
  if (w.dim() != x.dim()) n.fail("weight ", shape_str(w.shape()), " does not match input ", shape_str(x.shape()));
  const size_t dims = static_cast<size_t>(x.dim() - 2);
  const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  const auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
  Pads p = resolve_pads(n, x.shape(), kernel, stride, dilation);
  if (!p.symmetric()) {
    g.has_border = true;
    g.border = p;
    p = Pads{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  }
  g.options.stride = g.rank.lift(stride, 1);
  g.options.dilation = g.rank.lift(dilation, 1);
  g.options.padding = g.rank.lift(p.begin, 0);
  g.options.groups = n.i("group", 1);
  return g;
}

void add_ceil_padding(const OnnxReader& n, const Shape& x, const std::vector<int64_t>& kernel,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation, Pads& p) {
  if (!n.i("ceil_mode", 0)) return;
  for (size_t i = 0; i < kernel.size(); ++i) {
    const int64_t span = x[2 + i] + p.begin[i] + p.end[i], window = (kernel[i] - 1) * dilation[i] + 1;
    int64_t out = (span - window + stride[i] - 1) / stride[i] + 1;
    if ((out - 1) * stride[i] >= x[2 + i] + p.begin[i]) --out;  // a window must start inside the input
    p.end[i] += std::max<int64_t>(0, (out - 1) * stride[i] + window - span);
  }
}

PoolGeometry pool_geometry(const OnnxReader& n, const Tensor& x) {
  const SpatialRank r = spatial_rank(n, x);
  const size_t dims = static_cast<size_t>(x.dim() - 2);
  auto kernel = n.ints("kernel_shape");
  if (kernel.size() != dims) n.fail("kernel_shape has ", kernel.size(), " values; ", dims, " expected");
  auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
  Pads p = resolve_pads(n, x.shape(), kernel, stride, dilation);
  add_ceil_padding(n, x.shape(), kernel, stride, dilation, p);
  return {r, kernel, stride, dilation, p};
}

bool pads_fit_kernel(const std::vector<int64_t>& kernel, const Pads& p) {
  for (size_t i = 0; i < kernel.size(); ++i)
    if (p.begin[i] * 2 > kernel[i]) return false;
  return p.symmetric();
}

Tensor window_sums(const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                   const std::vector<int64_t>& dilation) {
  const size_t dims = kernel.size();
  std::vector<int64_t> out(dims), tap(dims, 0);
  for (size_t i = 0; i < dims; ++i)
    out[i] = (x.shape()[2 + i] - dilation[i] * (kernel[i] - 1) - 1) / stride[i] + 1;
  Tensor total;
  for (;;) {
    Tensor t = x;
    for (size_t i = 0; i < dims; ++i) {
      const int64_t first = tap[i] * dilation[i];
      t = t.slice(static_cast<int64_t>(2 + i), first, first + (out[i] - 1) * stride[i] + 1, stride[i]);
    }
    total = total.defined() ? total + t : t;
    size_t i = 0;  // the next tap, the last axis fastest
    for (; i < dims; ++i) {
      const size_t axis = dims - 1 - i;
      if (++tap[axis] < kernel[axis]) break;
      tap[axis] = 0;
    }
    if (i == dims) return total;
  }
}

}  // namespace kiln::onnx_spatial

// ONNX normalizations that are compositions of Kiln ops: RMSNormalization
// (and ONNX Runtime's SimplifiedLayerNormalization),
// LpNormalization, MeanVarianceNormalization, GroupNormalization (read onto
// group_norm with per-channel weights), and Hardmax.
#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

// The axes from `axis` to the last.
std::vector<int64_t> trailing_axes(const OnnxNode& n, const Tensor& x, int64_t fallback) {
  std::vector<int64_t> axes;
  for (int64_t a = normalize_axis(n, n.i("axis", fallback), x.dim()); a < x.dim(); ++a) axes.push_back(a);
  return axes;
}

// Y = X / sqrt(mean(X^2 over the trailing axes) + epsilon) * scale; and
// ONNX Runtime's name for it before RMSNormalization joined ONNX,
// SimplifiedLayerNormalization, whose second output is that factor.
std::vector<Tensor> rms_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const Tensor inv = inverse_rms(x, trailing_axes(n, x, -1), n.f("epsilon", 1e-5));
  std::vector<Tensor> out = {x * inv * input(n, in, 1)};
  if (n.op_type() == "SimplifiedLayerNormalization") out.push_back(inv);
  return out;
}

// Y = X / ||X||_p along `axis`, p 1 or 2; a zero vector stays zero.
std::vector<Tensor> lp_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const int64_t axis = normalize_axis(n, n.i("axis", -1), x.dim()), p = n.i("p", 2);
  if (p != 1 && p != 2) n.fail("p must be 1 or 2, got ", p);
  const Tensor norm = p == 1 ? sum(abs(x), {axis}, true) : sqrt(sum(x * x, {axis}, true));
  return {x / where(eq(norm, scalar_like(0, norm)), scalar_like(1, norm), norm)};
}

// Y = (X - mean) / sqrt(var + 1e-9) over `axes` (default N, H, W).
std::vector<Tensor> mean_variance_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  std::vector<int64_t> axes = n.ints("axes", {0, 2, 3});
  for (int64_t& a : axes) a = normalize_axis(n, a, x.dim());
  const Tensor centered = x - mean(x, axes, true);
  return {centered * rsqrt(mean(centered * centered, axes, true) + scalar_like(1e-9, x))};
}

// Opset 18 gives scale and bias per group, 21 per channel; group_norm takes
// them per channel.
std::vector<Tensor> group_normalization(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (x.dim() < 3) n.fail("input must be [N, C, D1, ...], got ", shape_str(x.shape()));
  const int64_t groups = n.required_i("num_groups"), channels = x.shape()[1];
  if (groups <= 0 || channels % groups) n.fail("num_groups ", groups, " does not divide the ", channels, " channels");
  Tensor scale = input(n, in, 1), bias = input(n, in, 2);
  if (scale.numel() == groups && groups != channels) {
    auto per_channel = [&](const Tensor& t) {
      return t.reshape({groups, 1}).expand({groups, channels / groups}).reshape({channels});
    };
    scale = per_channel(scale);
    bias = per_channel(bias);
  }
  if (scale.numel() != channels || bias.numel() != channels)
    n.fail("scale and bias must hold one value per group or per channel, got ", shape_str(scale.shape()), " and ",
           shape_str(bias.shape()));
  return {group_norm(x, groups, scale.reshape({channels}).contiguous(), bias.reshape({channels}).contiguous(),
                     n.f("epsilon", 1e-5))};
}

// 1 at the first maximum along `axis`, 0 elsewhere; before opset 13 the input
// is flattened to 2-d at `axis` (default 1) first.
std::vector<Tensor> hardmax(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  Tensor flat = x;
  int64_t axis = 0;
  if (n.opset() >= 13) {
    axis = normalize_axis(n, n.i("axis", -1), x.dim());
  } else {
    const int64_t at = x.dim() == 0 ? 0 : normalize_axis(n, n.i("axis", 1), x.dim());
    int64_t outer = 1;
    for (int64_t i = 0; i < at; ++i) outer *= x.shape()[i];
    flat = x.reshape({outer, x.numel() / std::max<int64_t>(outer, 1)});
    axis = 1;
  }
  const int64_t rank = flat.dim();
  Tensor hot = one_hot(argmax(flat, axis, false), flat.shape()[axis]);  // the class axis last
  if (axis != rank - 1) {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < rank - 1; ++d) {
      if (d == axis) order.push_back(rank - 1);
      order.push_back(d);
    }
    hot = hot.permute(order);
  }
  return {cast(hot, x.dtype()).reshape(x.shape())};
}

}  // namespace

Tensor inverse_rms(const Tensor& x, const std::vector<int64_t>& axes, double eps) {
  return rsqrt(mean(x * x, axes, true) + scalar_like(eps, x));
}

void add_norm_converters(ConverterTable& t) {
  t["RMSNormalization"] = rms_normalization;
  t["SimplifiedLayerNormalization"] = rms_normalization;
  t["LpNormalization"] = lp_normalization;
  t["MeanVarianceNormalization"] = mean_variance_normalization;
  t["GroupNormalization"] = group_normalization;
  t["Hardmax"] = hardmax;
}

}  // namespace kiln::runtime

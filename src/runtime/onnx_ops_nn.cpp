// ONNX neural-network ops: convolution, pooling, normalization, matrix products, softmax.
#include <cmath>
#include <limits>

#include "kiln/functional.h"
#include "kiln/registry.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

// Padding of each spatial axis, begin and end, from pads / auto_pad.
struct Pads {
  std::vector<int64_t> begin, end;
  bool symmetric() const { return begin == end; }
  bool any() const {
    for (size_t i = 0; i < begin.size(); ++i)
      if (begin[i] || end[i]) return true;
    return false;
  }
};

Pads resolve_pads(const OnnxNode& n, const Shape& x, const std::vector<int64_t>& kernel,
                  const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation) {
  size_t dims = kernel.size();
  Pads p{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  std::string auto_pad = n.s("auto_pad", "NOTSET");
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
      int64_t in = x[2 + i], out = (in + stride[i] - 1) / stride[i];
      int64_t total = std::max<int64_t>(0, (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in);
      p.begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p.end[i] = total - p.begin[i];
    }
  } else if (auto_pad != "VALID") {
    n.fail("auto_pad '", auto_pad, "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  }
  return p;
}

// Kiln's pad takes (before, after) pairs from the last axis backwards.
Tensor pad_spatial(const Tensor& x, const Pads& p, double value) {
  std::vector<int64_t> pads;
  for (size_t i = p.begin.size(); i-- > 0;) {
    pads.push_back(p.begin[i]);
    pads.push_back(p.end[i]);
  }
  return pad(x, pads, "constant", value);
}

std::vector<int64_t> spatial_attr(const OnnxNode& n, const char* name, size_t dims, int64_t fallback) {
  auto v = n.ints(name, std::vector<int64_t>(dims, fallback));
  if (v.size() != dims) n.fail(name, " has ", v.size(), " values; ", dims, " expected");
  return v;
}

// 1-d ops run as 2-d ones with a unit height.
struct SpatialRank {
  bool one_d = false;
  Tensor lift(const Tensor& x) { return one_d ? x.unsqueeze(2) : x; }
  Tensor lower(const Tensor& y) { return one_d ? y.squeeze(2) : y; }
  std::vector<int64_t> lift(std::vector<int64_t> v, int64_t unit) {
    if (one_d) v.insert(v.begin(), unit);
    return v;
  }
};

SpatialRank spatial_rank(const OnnxNode& n, const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4)
    n.unsupported("only 1-d and 2-d spatial inputs ([N, C, L] or [N, C, H, W]) are supported, got ", shape_str(x.shape()));
  return {x.dim() == 3};
}

std::vector<Tensor> conv(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0), w = input(n, in, 1);
  Tensor b = in.size() > 2 ? in[2] : Tensor();
  SpatialRank r = spatial_rank(n, x);
  size_t dims = static_cast<size_t>(x.dim() - 2);
  if (w.dim() != x.dim()) n.fail("weight ", shape_str(w.shape()), " does not match input ", shape_str(x.shape()));
  std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
  Pads p = resolve_pads(n, x.shape(), kernel, stride, dilation);
  if (!p.symmetric()) {
    x = pad_spatial(x, p, 0.0);
    p = Pads{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  }
  ConvOptions o;
  o.stride = r.lift(stride, 1);
  o.dilation = r.lift(dilation, 1);
  o.padding = r.lift(p.begin, 0);
  o.groups = n.i("group", 1);
  return {r.lower(conv2d(r.lift(x), r.lift(w), b, o))};
}

std::vector<Tensor> conv_transpose(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0), w = input(n, in, 1);
  Tensor b = in.size() > 2 ? in[2] : Tensor();
  SpatialRank r = spatial_rank(n, x);
  size_t dims = static_cast<size_t>(x.dim() - 2);
  if (n.has("output_shape")) n.unsupported("output_shape is not supported; give pads and output_padding");
  if (n.s("auto_pad", "NOTSET") != "NOTSET") n.unsupported("auto_pad is not supported for ConvTranspose");
  auto pads = n.ints("pads", std::vector<int64_t>(2 * dims, 0));
  for (size_t i = 0; i < dims; ++i)
    if (pads[i] != pads[dims + i]) n.unsupported("asymmetric pads are not supported for ConvTranspose");
  ConvOptions o;
  o.stride = r.lift(spatial_attr(n, "strides", dims, 1), 1);
  o.dilation = r.lift(spatial_attr(n, "dilations", dims, 1), 1);
  o.padding = r.lift(std::vector<int64_t>(pads.begin(), pads.begin() + static_cast<long>(dims)), 0);
  o.output_padding = r.lift(spatial_attr(n, "output_padding", dims, 0), 0);
  o.groups = n.i("group", 1);
  return {r.lower(conv_transpose2d(r.lift(x), r.lift(w), b, o))};
}

// Extra end padding so that ceil_mode's last, partial window exists.
void add_ceil_padding(const OnnxNode& n, const Shape& x, const std::vector<int64_t>& kernel,
                      const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation, Pads& p) {
  if (!n.i("ceil_mode", 0)) return;
  for (size_t i = 0; i < kernel.size(); ++i) {
    int64_t span = x[2 + i] + p.begin[i] + p.end[i], window = (kernel[i] - 1) * dilation[i] + 1;
    int64_t out = (span - window + stride[i] - 1) / stride[i] + 1;
    if ((out - 1) * stride[i] >= x[2 + i] + p.begin[i]) --out;  // a window must start inside the input
    p.end[i] += std::max<int64_t>(0, (out - 1) * stride[i] + window - span);
  }
}

struct PoolGeometry {
  SpatialRank rank;
  std::vector<int64_t> kernel, stride, dilation;
  Pads pads;
};

PoolGeometry pool_geometry(const OnnxNode& n, const Tensor& x) {
  SpatialRank r = spatial_rank(n, x);
  size_t dims = static_cast<size_t>(x.dim() - 2);
  auto kernel = n.ints("kernel_shape");
  if (kernel.size() != dims) n.fail("kernel_shape has ", kernel.size(), " values; ", dims, " expected");
  auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
  Pads p = resolve_pads(n, x.shape(), kernel, stride, dilation);
  add_ceil_padding(n, x.shape(), kernel, stride, dilation, p);
  return {r, kernel, stride, dilation, p};
}

bool pads_fit_kernel(const PoolGeometry& g) {
  for (size_t i = 0; i < g.kernel.size(); ++i)
    if (g.pads.begin[i] * 2 > g.kernel[i]) return false;
  return g.pads.symmetric();
}

std::vector<Tensor> max_pool(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  if (n.output_wanted(1)) n.unsupported("the Indices output of MaxPool is not supported");
  if (!is_floating(x.dtype())) n.unsupported("MaxPool on ", dtype_name(x.dtype()), " is not supported");
  PoolGeometry g = pool_geometry(n, x);
  std::vector<int64_t> padding = g.pads.begin;
  // ceil_mode with even pads is the op's own ceil_mode; other uneven pads
  // become an explicit -inf border.
  PoolGeometry plain = g;
  plain.pads = resolve_pads(n, x.shape(), g.kernel, g.stride, g.dilation);
  const bool ceil = n.i("ceil_mode", 0) != 0 && pads_fit_kernel(plain);
  if (ceil) {
    padding = plain.pads.begin;
  } else if (!pads_fit_kernel(g)) {
    x = pad_spatial(x, g.pads, -std::numeric_limits<double>::infinity());
    padding.assign(g.kernel.size(), 0);
  }
  Attrs a{{"kernel", g.rank.lift(g.kernel, 1)},
          {"stride", g.rank.lift(g.stride, 1)},
          {"padding", g.rank.lift(padding, 0)},
          {"dilation", g.rank.lift(g.dilation, 1)},
          {"ceil_mode", ceil}};
  return {g.rank.lower(call("max_pool2d", {g.rank.lift(x)}, a)[0])};
}

std::vector<Tensor> average_pool(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  PoolGeometry g = pool_geometry(n, x);
  for (int64_t d : g.dilation)
    if (d != 1) n.unsupported("dilations other than 1 are not supported for AveragePool");
  bool include_pad = n.i("count_include_pad", 0) != 0;
  auto kernel = g.rank.lift(g.kernel, 1), stride = g.rank.lift(g.stride, 1);
  if (pads_fit_kernel(g) && !n.i("ceil_mode", 0))
    return {g.rank.lower(avg_pool2d(g.rank.lift(x), kernel, stride, g.rank.lift(g.pads.begin, 0), include_pad))};
  // Uneven padding: window sums over the padded input, divided by how many
  // elements each window counts (the explicit pads, when count_include_pad,
  // never the ceil_mode overhang).
  Pads explicit_pads = resolve_pads(n, x.shape(), g.kernel, g.stride, g.dilation);
  Shape mask_shape = x.shape();
  mask_shape[0] = mask_shape[1] = 1;
  Tensor mask = ones(mask_shape, x.dtype());
  Pads rest = g.pads;
  if (include_pad) {
    mask = pad_spatial(mask, explicit_pads, 1.0);
    for (size_t i = 0; i < rest.begin.size(); ++i) {
      rest.begin[i] -= explicit_pads.begin[i];
      rest.end[i] -= explicit_pads.end[i];
    }
  }
  Tensor sums = avg_pool2d(g.rank.lift(pad_spatial(x, g.pads, 0.0)), kernel, stride, {0, 0}, true);
  Tensor counts = avg_pool2d(g.rank.lift(pad_spatial(mask, rest, 0.0)), kernel, stride, {0, 0}, true);
  return {g.rank.lower(sums / counts)};
}

std::vector<Tensor> global_pool(const OnnxNode& n, const std::vector<Tensor>& in, bool max) {
  const Tensor& x = input(n, in, 0);
  std::vector<int64_t> axes;
  for (int64_t i = 2; i < x.dim(); ++i) axes.push_back(i);
  return {max ? amax(x, axes, true) : mean(x, axes, true)};
}

std::vector<Tensor> batch_norm_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  if (n.i("training_mode", 0)) n.unsupported("training_mode=1 is not supported; export the model in inference mode");
  for (size_t i = 1; i < n.num_outputs(); ++i)
    if (n.output_wanted(i)) n.unsupported("the running statistics outputs (training mode) are not supported");
  const Tensor& x = input(n, in, 0);
  return {batch_norm(x, input(n, in, 1), input(n, in, 2), input(n, in, 3), input(n, in, 4), false, 0.1,
                     n.f("epsilon", 1e-5))};
}

std::vector<Tensor> instance_norm(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (x.dim() < 3) n.fail("input must be [N, C, D1, ...], got ", shape_str(x.shape()));
  return {group_norm(x, x.shape()[1], input(n, in, 1), input(n, in, 2), n.f("epsilon", 1e-5))};
}

std::vector<Tensor> layer_norm_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t axis = normalize_axis(n, n.i("axis", -1), x.dim());
  double eps = n.f("epsilon", 1e-5);
  Shape normalized(x.shape().begin() + axis, x.shape().end());
  Tensor scale = input(n, in, 1), bias = in.size() > 2 ? in[2] : Tensor();
  if (scale.shape() != normalized) scale = scale.expand(normalized).contiguous();
  if (bias.defined() && bias.shape() != normalized) bias = bias.expand(normalized).contiguous();
  std::vector<Tensor> out = {layer_norm(x, normalized, scale, bias, eps)};
  if (n.output_wanted(1) || n.output_wanted(2)) {
    // The statistics, shaped like x with the normalized axes kept as 1.
    std::vector<int64_t> axes;
    for (int64_t a = axis; a < x.dim(); ++a) axes.push_back(a);
    Tensor m = mean(x, axes, true), d = x - m;
    out.push_back(m);
    out.push_back(rsqrt(mean(d * d, axes, true) + scalar_like(eps, x)));
  }
  return out;
}

std::vector<Tensor> dropout_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (in.size() > 2 && in[2].defined() && scalar_value(n, in[2], "training_mode") != 0)
    n.unsupported("training_mode=true is not supported; inference runs dropout as the identity");
  std::vector<Tensor> out = {x + scalar_like(0, x)};
  if (n.output_wanted(1)) out.push_back(ones(x.shape(), DType::Bool));
  return out;
}

std::vector<Tensor> matmul_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor a = input(n, in, 0), b = input(n, in, 1);
  if (a.dim() == 0 || b.dim() == 0) n.fail("MatMul inputs must have at least one axis");
  bool vec_a = a.dim() == 1, vec_b = b.dim() == 1;
  if (vec_a) a = a.unsqueeze(0);
  if (vec_b) b = b.unsqueeze(1);
  Tensor y = matmul(a, b);
  if (vec_b) y = y.squeeze(y.dim() - 1);
  if (vec_a) y = y.squeeze(y.dim() - (vec_b ? 1 : 2));
  return {y};
}

std::vector<Tensor> gemm(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor a = input(n, in, 0), b = input(n, in, 1);
  Tensor c = in.size() > 2 ? in[2] : Tensor();
  if (a.dim() != 2 || b.dim() != 2) n.fail("Gemm takes 2-d A and B, got ", shape_str(a.shape()), " and ", shape_str(b.shape()));
  if (n.i("transA", 0)) a = a.t();
  double alpha = n.f("alpha", 1.0), beta = n.f("beta", 1.0);
  // B as Kiln's [out, in] weight.
  Tensor w = n.i("transB", 0) ? b : b.t();
  int64_t out = w.shape()[0];
  bool bias_is_row = c.defined() && beta == 1.0 && (c.shape() == Shape{out} || c.shape() == Shape{1, out});
  Tensor y = linear(a, w, bias_is_row ? c.reshape({out}) : Tensor());
  if (alpha != 1.0) y = y * scalar_like(alpha, y);
  if (c.defined() && !bias_is_row) y = y + (beta == 1.0 ? c : c * scalar_like(beta, c));
  return {y};
}

// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss: scores [N, C, ...]
// with class indices [N, ...] and optional class weights; without
// ignore_index no target is ignored. The first also returns log_prob.
std::vector<Tensor> class_loss_op(const OnnxNode& n, const std::vector<Tensor>& in, bool softmax) {
  const Tensor& x = input(n, in, 0);
  Tensor target = input(n, in, 1);
  if (is_floating(target.dtype())) n.fail("labels must be integer class indices, got ", dtype_name(target.dtype()));
  if (target.dtype() != DType::Int64) target = cast(target, DType::Int64);
  CrossEntropyOptions o;
  o.reduction = n.s("reduction", "mean");
  if (o.reduction != "mean" && o.reduction != "sum" && o.reduction != "none")
    n.fail("reduction must be mean, sum or none, got '", o.reduction, "'");
  o.ignore_index = n.has("ignore_index") ? n.i("ignore_index", 0) : std::numeric_limits<int64_t>::min();
  if (in.size() > 2 && in[2].defined()) o.weight = in[2];
  if (!softmax) return {nll_loss(x, target, o)};
  Tensor log_prob = log_softmax(x, 1);
  std::vector<Tensor> out = {nll_loss(log_prob, target, o)};
  if (n.output_wanted(1)) out.push_back(log_prob);
  return out;
}

}  // namespace

void add_nn_converters(ConverterTable& t) {
  t["Conv"] = conv;
  t["ConvTranspose"] = conv_transpose;
  t["MaxPool"] = max_pool;
  t["AveragePool"] = average_pool;
  t["GlobalAveragePool"] = [](const OnnxNode& n, const std::vector<Tensor>& in) { return global_pool(n, in, false); };
  t["GlobalMaxPool"] = [](const OnnxNode& n, const std::vector<Tensor>& in) { return global_pool(n, in, true); };
  t["BatchNormalization"] = batch_norm_op;
  t["InstanceNormalization"] = instance_norm;
  t["LayerNormalization"] = layer_norm_op;
  t["Dropout"] = dropout_op;
  t["SoftmaxCrossEntropyLoss"] = [](const OnnxNode& n, const std::vector<Tensor>& in) { return class_loss_op(n, in, true); };
  t["NegativeLogLikelihoodLoss"] = [](const OnnxNode& n, const std::vector<Tensor>& in) { return class_loss_op(n, in, false); };
  t["MatMul"] = matmul_op;
  t["Gemm"] = gemm;
}

}  // namespace kiln::runtime

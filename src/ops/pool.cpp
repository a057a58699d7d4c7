// 2-D pooling: max, average, adaptive average, and their backward ops.
#include <limits>

#include "ops/onnx_spatial.h"
#include "ops/op_helpers.h"
#include "ops/pool_attrs.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

std::vector<int64_t> pair_of(const Attrs& a, const char* name, const std::vector<int64_t>& fallback) {
  auto v = a.get_ints(name, fallback);
  if (v.empty()) v = fallback;
  if (v.size() == 1) v.push_back(v[0]);
  KILN_CHECK(v.size() == 2, name, " must have 1 or 2 values, got ", v.size());
  return v;
}

Metas infer_pool(const Metas& in, const Attrs& a) {
  detail::check_rank(in[0], 4, "input", "N, C, H, W");
  const Pool2dAttrs pool = Pool2dAttrs::of(a);
  const auto &k = pool.kernel, &s = pool.stride, &p = pool.padding, &d = pool.dilation;
  const Shape& x = in[0].shape;
  Shape y = x;
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(k[i] > 0 && s[i] > 0 && d[i] > 0, "kernel, stride and dilation must be positive");
    KILN_CHECK(p[i] >= 0 && p[i] * 2 <= k[i], "padding ", p[i], " must be at most half the kernel size ", k[i]);
    const int64_t span = x[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1;
    // ceil_mode (max pooling): a last, partial window where one starts
    // inside the input or its left padding, as in PyTorch and ONNX.
    if (pool.ceil_mode && span >= 0) {
      y[2 + i] = (span + s[i] - 1) / s[i] + 1;
      if ((y[2 + i] - 1) * s[i] >= x[2 + i] + p[i]) --y[2 + i];
    } else {
      y[2 + i] = span / s[i] + 1;
    }
    KILN_CHECK(y[2 + i] > 0, "input ", shape_str(x), " is too small for pooling with kernel ", k[i]);
  }
  return {{true, y, in[0].dtype, in[0].device}};
}

// ONNX pooling: kernel_shape, strides and pads (begin and end alike).
Attrs onnx_pool_attrs(const OnnxWriter& w) {
  const Pool2dAttrs pool = Pool2dAttrs::of(w.attrs());
  const auto &k = pool.kernel, &s = pool.stride, &p = pool.padding;
  return {{"kernel_shape", std::vector<int64_t>{k[0], k[1]}}, {"strides", std::vector<int64_t>{s[0], s[1]}},
          {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}}};
}
void write_max_pool(OnnxWriter& w) {
  w.require_unused_from(1, "the argmax indices");
  Attrs a = onnx_pool_attrs(w);
  const Pool2dAttrs pool = Pool2dAttrs::of(w.attrs());
  a.set("dilations", std::vector<int64_t>{pool.dilation[0], pool.dilation[1]});
  if (pool.ceil_mode) a.set("ceil_mode", int64_t{1});
  w.node("MaxPool", {w.in(0)}, {w.out()}, a);
}
void write_avg_pool(OnnxWriter& w) {
  Attrs a = onnx_pool_attrs(w);
  a.set("count_include_pad", w.attrs().get_bool("count_include_pad", true));
  w.node("AveragePool", {w.in(0)}, {w.out()}, a);
}
void write_adaptive_avg_pool(OnnxWriter& w) {
  const Shape &x = w.in_shape(), &y = w.out_shape();
  if (y[2] == 1 && y[3] == 1) {
    w.node("GlobalAveragePool", {w.in(0)}, {w.out()});
    return;
  }
  KILN_CHECK(x[2] % y[2] == 0 && x[3] % y[3] == 0, "export: adaptive_avg_pool2d from ", shape_str(x), " to ",
             shape_str(y), " has uneven windows, which ONNX AveragePool cannot express; choose an output size "
             "that divides the input size");
  std::vector<int64_t> k = {x[2] / y[2], x[3] / y[3]};
  w.node("AveragePool", {w.in(0)}, {w.out()}, {{"kernel_shape", k}, {"strides", k}});
}

OpDef pool(const char* name, OnnxExport onnx, std::vector<std::string> attrs, InferFn infer, const char* backward) {
  OpDef d;
  d.name = name;
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = std::move(attrs);
  d.infer = std::move(infer);
  std::string bw = backward;
  d.grad = [bw](const GradContext& c, const Grads& g) -> Grads { return {call(bw, {g[0], c.inputs[0]}, c.attrs)[0]}; };
  d.onnx = std::move(onnx);
  d.category = "pooling";
  return d;
}

OpDef pool_backward(const char* name, std::vector<std::string> attrs = {}) {
  OpDef d;
  d.name = name;
  d.attrs = std::move(attrs);  // the forward op's, which its gradient passes on
  d.inputs = {"grad_y", "x"};
  d.outputs = {"grad_x"};
  d.infer = [](const Metas& in, const Attrs&) -> Metas { return {in[1]}; };
  d.tags = kTagBackward | kTagNondifferentiable;
  d.category = "pooling";
  return d;
}

// ONNX MaxPool, 1-d or 2-d. ceil_mode with even pads is the op's own
// ceil_mode; other uneven pads become an explicit -inf border. Indices are
// flat over the whole input, row-major (storage_order 0) or with H and W
// swapped (1); Kiln's count within one plane.
std::vector<Tensor> read_max_pool(const OnnxReader& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  Tensor x = n.input(in, 0);
  if (x.dim() == 5) {  // max_pool3d, with ceil_mode's and uneven pads as an explicit -inf border
    if (n.output_wanted(1)) n.unsupported("the Indices output of a 3-d MaxPool is not supported");
    const auto kernel = n.ints("kernel_shape");
    if (kernel.size() != 3) n.fail("kernel_shape has ", kernel.size(), " values; 3 expected");
    const auto stride = spatial_attr(n, "strides", 3, 1), dilation = spatial_attr(n, "dilations", 3, 1);
    Pads p = resolve_pads(n, x.shape(), kernel, stride, dilation);
    add_ceil_padding(n, x.shape(), kernel, stride, dilation, p);
    return {max_pool3d(pad_spatial(x, p, -std::numeric_limits<double>::infinity()), kernel, stride, {0, 0, 0}, dilation)};
  }
  // 8-bit values (a quantized model's) pool as they are, an explicit border holding their lowest value.
  const bool eight_bit = x.dtype() == DType::UInt8 || x.dtype() == DType::Int8;
  if (!is_floating(x.dtype()) && !eight_bit) n.unsupported("MaxPool on ", dtype_name(x.dtype()), " is not supported");
  const PoolGeometry g = pool_geometry(n, x);
  const Pads plain = resolve_pads(n, x.shape(), g.kernel, g.stride, g.dilation);
  std::vector<int64_t> padding = g.pads.begin;
  const bool ceil = n.i("ceil_mode", 0) != 0 && pads_fit_kernel(g.kernel, plain);
  const bool indices = n.output_wanted(1);
  if (ceil) {
    padding = plain.begin;
  } else if (!pads_fit_kernel(g.kernel, g.pads)) {
    if (indices) n.unsupported("the Indices output with pads larger than half the kernel is not supported");
    const double lowest = x.dtype() == DType::UInt8 ? 0.0 : x.dtype() == DType::Int8 ? -128.0
                                                                                   : -std::numeric_limits<double>::infinity();
    x = pad_spatial(x, g.pads, lowest);
    padding.assign(g.kernel.size(), 0);
  }
  const Attrs a{{"kernel", g.rank.lift(g.kernel, 1)},
                {"stride", g.rank.lift(g.stride, 1)},
                {"padding", g.rank.lift(padding, 0)},
                {"dilation", g.rank.lift(g.dilation, 1)},
                {"ceil_mode", ceil}};
  const Tensor lifted = g.rank.lift(x);
  std::vector<Tensor> y = call(KILN_OP("max_pool2d"), {lifted}, a);
  std::vector<Tensor> out = {g.rank.lower(y[0])};
  if (!indices) return out;
  const int64_t height = lifted.shape()[2], width = lifted.shape()[3], plane = height * width;
  Tensor idx = y[1];
  if (n.i("storage_order", 0)) {
    const Tensor w = scalar_tensor(static_cast<double>(width), DType::Int64);
    idx = remainder(idx, w) * scalar_tensor(static_cast<double>(height), DType::Int64) + div(idx, w);
  }
  const Shape& ys = y[1].shape();
  const Tensor base = arange(ys[0] * ys[1], DType::Int64, idx.device()).reshape({ys[0], ys[1], 1, 1}) *
                      scalar_tensor(static_cast<double>(plane), DType::Int64);
  out.push_back(g.rank.lower(idx + base));
  return out;
}

// A 5-d AveragePool, or one with dilations: window sums over the
// zero-padded input divided by how many elements each window counts (the
// explicit pads when count_include_pad, never ceil_mode's overhang).
std::vector<Tensor> read_avg_pool_by_sums(const OnnxReader& n, const Tensor& x) {
  using namespace onnx_spatial;
  const size_t dims = static_cast<size_t>(x.dim() - 2);
  const auto kernel = n.ints("kernel_shape");
  if (kernel.size() != dims) n.fail("kernel_shape has ", kernel.size(), " values; ", dims, " expected");
  const auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1);
  const Pads explicit_pads = resolve_pads(n, x.shape(), kernel, stride, dilation);
  Pads all = explicit_pads;
  add_ceil_padding(n, x.shape(), kernel, stride, dilation, all);
  Shape mask_shape = x.shape();
  mask_shape[0] = mask_shape[1] = 1;
  Tensor mask = ones(mask_shape, x.dtype(), x.device());
  Pads rest = all;
  if (n.i("count_include_pad", 0)) {
    mask = pad_spatial(mask, explicit_pads, 1.0);
    for (size_t i = 0; i < dims; ++i) {
      rest.begin[i] -= explicit_pads.begin[i];
      rest.end[i] -= explicit_pads.end[i];
    }
  }
  const Tensor sums = window_sums(pad_spatial(x, all, 0.0), kernel, stride, dilation);
  const Tensor counts = window_sums(pad_spatial(mask, rest, 0.0), kernel, stride, dilation);
  return {sums / counts};
}

// ONNX AveragePool, 1-d or 2-d. Uneven padding: window sums over the padded
// input, divided by how many elements each window counts (the explicit pads,
// when count_include_pad, never the ceil_mode overhang).
std::vector<Tensor> read_avg_pool(const OnnxReader& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  const Tensor& x = n.input(in, 0);
  if (x.dim() == 5) return read_avg_pool_by_sums(n, x);
  const PoolGeometry g = pool_geometry(n, x);
  for (int64_t d : g.dilation)
    if (d != 1) return read_avg_pool_by_sums(n, x);
  const bool include_pad = n.i("count_include_pad", 0) != 0;
  const auto kernel = g.rank.lift(g.kernel, 1), stride = g.rank.lift(g.stride, 1);
  if (pads_fit_kernel(g.kernel, g.pads) && !n.i("ceil_mode", 0))
    return {g.rank.lower(avg_pool2d(g.rank.lift(x), kernel, stride, g.rank.lift(g.pads.begin, 0), include_pad))};
  const Pads explicit_pads = resolve_pads(n, x.shape(), g.kernel, g.stride, g.dilation);
  Shape mask_shape = x.shape();
  mask_shape[0] = mask_shape[1] = 1;
  Tensor mask = ones(mask_shape, x.dtype(), x.device());
  Pads rest = g.pads;
  if (include_pad) {
    mask = pad_spatial(mask, explicit_pads, 1.0);
    for (size_t i = 0; i < rest.begin.size(); ++i) {
      rest.begin[i] -= explicit_pads.begin[i];
      rest.end[i] -= explicit_pads.end[i];
    }
  }
  const Tensor sums = avg_pool2d(g.rank.lift(pad_spatial(x, g.pads, 0.0)), kernel, stride, {0, 0}, true);
  const Tensor counts = avg_pool2d(g.rank.lift(pad_spatial(mask, rest, 0.0)), kernel, stride, {0, 0}, true);
  return {g.rank.lower(sums / counts)};
}

// MindSpore's MaxPool and AvgPool: kernel_size and strides as (1, 1, h, w),
// pad_mode "valid" or "same" (TensorFlow's: the odd pixel at the end, and an
// average over the pixels inside the input only).
std::vector<Tensor> read_mindspore_pool(const OnnxReader& n, const std::vector<Tensor>& in) {
  detail::require_nchw(n);
  const Tensor& x = n.input(in, 0);
  if (x.dim() != 4) n.fail("takes x [N, C, H, W], got ", x.meta_str());
  const auto kernel = detail::mindspore_hw(n, "kernel_size", 1), stride = detail::mindspore_hw(n, "strides", 1);
  const bool is_max = n.op_type() == "MaxPool";
  const std::string mode = detail::mindspore_pad_mode(n, "valid");
  if (mode == "pad") n.unsupported("pad_mode 'pad' (Kiln reads 'valid' and 'same')");
  if (mode == "valid") return {is_max ? max_pool2d(x, kernel, stride) : avg_pool2d(x, kernel, stride)};
  const auto p = detail::same_padding(x.shape(), kernel, stride, {1, 1});
  const onnx_spatial::Pads pads{{p[0], p[2]}, {p[1], p[3]}};
  if (is_max) return {max_pool2d(onnx_spatial::pad_spatial(x, pads, -std::numeric_limits<double>::infinity()), kernel, stride)};
  if (pads.symmetric()) return {avg_pool2d(x, kernel, stride, pads.begin, false)};
  Shape mask_shape = x.shape();
  mask_shape[0] = mask_shape[1] = 1;
  const Tensor sums = avg_pool2d(onnx_spatial::pad_spatial(x, pads, 0.0), kernel, stride);
  const Tensor counts =
      avg_pool2d(onnx_spatial::pad_spatial(ones(mask_shape, x.dtype(), x.device()), pads, 0.0), kernel, stride);
  return {sums / counts};
}

// Max pooling also returns the position of each maximum (flat index within
// its H*W plane, as PyTorch's return_indices), so the backward is a scatter.
OpDefiner d_max([] {
  OpDef d = pool("max_pool2d", {{"MaxPool"}, write_max_pool}, {"kernel:ints", "stride:ints=kernel", "padding:ints=[0,0]", "dilation:ints=[1,1]", "ceil_mode:bool=false"},
                 [](const Metas& in, const Attrs& a) -> Metas {
                   Metas out = infer_pool(in, a);
                   out.push_back({true, out[0].shape, DType::Int64, out[0].device});
                   return out;
                 },
                 "");
  d.outputs = {"y", "indices"};
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    return {call("max_pool2d_backward", {g[0], c.outputs[1]}, {{"input_shape", c.inputs[0].shape()}})[0]};
  };
  d.onnx_import = onnx_reader({"MaxPool"}, read_max_pool);
  d.mindspore_import = onnx_reader({"MaxPool"}, read_mindspore_pool);
  return d;
}());
OpDefiner d_avg(detail::reads_mindspore(detail::reads_onnx(pool("avg_pool2d", {{"AveragePool"}, write_avg_pool}, {"kernel:ints", "stride:ints=kernel", "padding:ints=[0,0]", "count_include_pad:bool=true"},
                                        infer_pool, "avg_pool2d_backward"),
                                   onnx_reader({"AveragePool"}, read_avg_pool)),
                                   onnx_reader({"AvgPool"}, read_mindspore_pool)));
OpDefiner d_adaptive(detail::reads_mindspore(pool(
    "adaptive_avg_pool2d", {{"GlobalAveragePool", "AveragePool"}, write_adaptive_avg_pool}, {"output_size:ints"},
    [](const Metas& in, const Attrs& a) -> Metas {
      detail::check_rank(in[0], 4, "input", "N, C, H, W");
      auto o = pair_of(a, "output_size", {});
      KILN_CHECK(o[0] > 0 && o[1] > 0, "output_size must be positive, got ", shape_str(o));
      return {{true, {in[0].shape[0], in[0].shape[1], o[0], o[1]}, in[0].dtype, in[0].device}};
    },
    "adaptive_avg_pool2d_backward"),
    // MindSpore's AdaptiveAvgPool2D (output_size; a None size keeps the input's).
    onnx_reader({"AdaptiveAvgPool2D"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      const Tensor& x = n.input(in, 0);
      if (x.dim() != 4) n.fail("takes x [N, C, H, W], got ", x.meta_str());
      auto size = n.ints("output_size");
      if (size.size() == 1) size.push_back(size[0]);
      if (size.size() != 2) n.fail("output_size should hold 1 or 2 values");
      for (size_t i = 0; i < 2; ++i)
        if (size[i] <= 0) size[i] = x.shape()[2 + i];
      return {adaptive_avg_pool2d(x, size)};
    })));
OpDefiner d_max_bw([] {
  OpDef d = pool_backward("max_pool2d_backward");
  // mask (optional): keep the gradient only where mask > 0, the backward of a
  // ReLU before the pool in one pass (graph mode's fusion passes it).
  d.inputs = {"grad_y", "indices", "mask?"};
  d.attrs = {"input_shape:ints"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    return {{true, a.get_ints("input_shape"), in[0].dtype, in[0].device}};
  };
  return d;
}());
OpDefiner d_avg_bw(pool_backward("avg_pool2d_backward", {"kernel:ints", "stride:ints=kernel", "padding:ints=[0,0]",
                                                         "count_include_pad:bool=true"}));
OpDefiner d_adaptive_bw(pool_backward("adaptive_avg_pool2d_backward", {"output_size:ints"}));

}  // namespace

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding,
                  bool ceil_mode) {
  if (stride.empty()) stride = kernel;
  return call(KILN_OP("max_pool2d"), {x},
              {{"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"ceil_mode", ceil_mode}})[0];
}
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding,
                  std::vector<int64_t> dilation) {
  if (stride.empty()) stride = kernel;
  KILN_CHECK(x.dim() == 5, "max_pool3d: input must be [N, C, D, H, W], got ", x.meta_str());
  KILN_CHECK(kernel.size() == 3 && stride.size() == 3 && padding.size() == 3 && dilation.size() == 3,
             "max_pool3d: kernel, stride, padding and dilation take 3 values (D, H, W)");
  const double lowest = -std::numeric_limits<double>::infinity();
  const Tensor padded = pad(x, {padding[2], padding[2], padding[1], padding[1], padding[0], padding[0]}, "constant", lowest);
  const Shape& s = padded.shape();
  const int64_t n = s[0], c = s[1], depth = s[2];
  const int64_t out_depth = (depth - dilation[0] * (kernel[0] - 1) - 1) / stride[0] + 1;
  KILN_CHECK(out_depth > 0, "max_pool3d: input ", shape_str(x.shape()), " is too shallow for a window of depth ", kernel[0]);
  // Each depth slice pooled over H and W, then the maximum across each depth window.
  const Tensor planes = padded.permute({0, 2, 1, 3, 4}).reshape({n * depth, c, s[3], s[4]});
  const Tensor pooled = call(KILN_OP("max_pool2d"), {planes},
                             {{"kernel", std::vector<int64_t>{kernel[1], kernel[2]}},
                              {"stride", std::vector<int64_t>{stride[1], stride[2]}},
                              {"padding", std::vector<int64_t>{0, 0}},
                              {"dilation", std::vector<int64_t>{dilation[1], dilation[2]}}})[0];
  const Shape& ps = pooled.shape();
  const Tensor by_depth = pooled.reshape({n, depth, c, ps[2], ps[3]});
  Tensor y;
  for (int64_t k = 0; k < kernel[0]; ++k) {
    const int64_t first = k * dilation[0];
    const Tensor tap = by_depth.slice(1, first, first + (out_depth - 1) * stride[0] + 1, stride[0]);
    y = k == 0 ? tap : maximum(y, tap);
  }
  return y.permute({0, 2, 1, 3, 4}).contiguous();
}
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride, std::vector<int64_t> padding,
                  bool count_include_pad) {
  if (stride.empty()) stride = kernel;
  return call1(KILN_OP("avg_pool2d"), {x},
               {{"kernel", kernel}, {"stride", stride}, {"padding", padding}, {"count_include_pad", count_include_pad}});
}
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  return call1(KILN_OP("adaptive_avg_pool2d"), {x}, {{"output_size", output_size}});
}

}  // namespace kiln

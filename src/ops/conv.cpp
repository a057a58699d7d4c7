// Convolutions: conv1d, conv2d, conv_transpose2d and the two ops their
// gradients are made of (input grad, weight grad).
#include "ops/onnx_spatial.h"
#include "ops/conv_attrs.h"
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

// As a list, for ONNX attributes and the output padding (Conv2dAttrs has the rest).
std::vector<int64_t> pair_attr(const Attrs& a, const char* name, int64_t fallback) {
  const auto v = spatial_pair(a, name, fallback);
  return {v[0], v[1]};
}

int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

void check_geometry(const Attrs& a) {
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(c.stride[i] > 0, "stride must be positive, got ", c.stride[i]);
    KILN_CHECK(c.padding[i] >= 0, "padding must be >= 0, got ", c.padding[i]);
    KILN_CHECK(c.dilation[i] > 0, "dilation must be positive, got ", c.dilation[i]);
  }
  KILN_CHECK(c.groups > 0, "groups must be positive");
}

Metas infer_conv2d(const Metas& in, const Attrs& a) {
  check_geometry(a);
  const Shape &x = in[0].shape, &w = in[1].shape;
  detail::check_rank(in[0], 4, "input", "N, C, H, W");
  detail::check_rank(in[1], 4, "weight", "out_channels, in_channels/groups, kH, kW");
  detail::check_same_dtype(in, 0, 1);
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  const int64_t g = c.groups;
  KILN_CHECK(x[1] == w[1] * g, "input has ", x[1], " channels but weight ", shape_str(w), " with groups=", g,
             " expects ", w[1] * g);
  KILN_CHECK(w[0] % g == 0, "out_channels (", w[0], ") must be divisible by groups (", g, ")");
  if (in.size() > 2 && in[2].defined)
    KILN_CHECK(in[2].shape == Shape{w[0]}, "bias must have shape [", w[0], "], got ", shape_str(in[2].shape));
  const auto &s = c.stride, &p = c.padding, &d = c.dilation;
  int64_t oh = conv_out_size(x[2], w[2], s[0], p[0], d[0]), ow = conv_out_size(x[3], w[3], s[1], p[1], d[1]);
  KILN_CHECK(oh > 0 && ow > 0, "input ", shape_str(x), " is too small for a ", w[2], "x", w[3],
             " kernel with this padding/dilation (output would be ", oh, "x", ow, ")");
  return {{true, {x[0], w[0], oh, ow}, in[0].dtype, in[0].device}};
}

// The geometry of a convolution's attributes, for the ops its gradient is
// made of (which take no activation or output padding), with a shape.
Attrs geometry(const Attrs& a) {
  Attrs r;
  for (const char* g : {"stride", "padding", "dilation", "groups"})
    if (const AttrValue* v = a.find(g)) r.set(g, *v);
  return r;
}
Attrs with_shape(const Attrs& a, const char* name, const Shape& s) {
  Attrs r = geometry(a);
  r.set(name, s);
  return r;
}

// ONNX Conv and ConvTranspose; a fused ReLU (activation=relu) is a Relu after.
void write_conv(OnnxWriter& w, bool transposed) {
  const Attrs& a = w.attrs();
  auto pad = pair_attr(a, "padding", 0);
  const Shape& k = w.in_shape(1);
  bool relu = a.get_string("activation", "none") == "relu";
  std::string y = relu ? w.unique("conv_out") : w.out();
  Attrs c = {{"kernel_shape", std::vector<int64_t>{k[2], k[3]}},
             {"strides", pair_attr(a, "stride", 1)},
             {"pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]}},
             {"dilations", pair_attr(a, "dilation", 1)},
             {"group", a.get_int("groups", 1)}};
  if (transposed) c.set("output_padding", pair_attr(a, "output_padding", 0));
  w.node(transposed ? "ConvTranspose" : "Conv", {w.in(0), w.in(1), w.in(2)}, {y}, c);
  if (relu) w.node("Relu", {y}, {w.out()});
}

// ONNX Conv and ConvTranspose, 1-d or 2-d. Uneven padding of Conv becomes
// an explicit zero border.
std::vector<Tensor> read_conv3d(const OnnxReader& n, const std::vector<Tensor>& in);

std::vector<Tensor> read_conv(const OnnxReader& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  Tensor x = n.input(in, 0);
  const Tensor& w = n.input(in, 1);
  if (x.dim() == 5) return read_conv3d(n, in);
  const ConvGeometry g = conv_geometry(n, x, w);
  if (g.has_border) x = pad_spatial(x, g.border, 0.0);
  return {g.rank.lower(conv2d(g.rank.lift(x), g.rank.lift(w), OnnxReader::optional(in, 2), g.options))};
}

// A 5-d Conv: conv3d, with uneven pads as an explicit zero border.
std::vector<Tensor> read_conv3d(const OnnxReader& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  Tensor x = n.input(in, 0);
  const Tensor& w = n.input(in, 1);
  if (w.dim() != 5) n.fail("weight ", shape_str(w.shape()), " does not match input ", shape_str(x.shape()));
  const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  Conv3dOptions o;
  o.stride = spatial_attr(n, "strides", 3, 1);
  o.dilation = spatial_attr(n, "dilations", 3, 1);
  o.groups = n.i("group", 1);
  Pads p = resolve_pads(n, x.shape(), kernel, o.stride, o.dilation);
  if (!p.symmetric()) {
    x = pad_spatial(x, p, 0.0);
    p = Pads{{0, 0, 0}, {0, 0, 0}};
  }
  o.padding = p.begin;
  return {conv3d(x, w, OnnxReader::optional(in, 2), o)};
}

// ConvTranspose's pads per spatial axis: given, or from output_shape or
// auto_pad SAME_* (the total split as the ONNX spec says, with floor
// division, so a negative total adds rows at the end as output_padding does).
onnx_spatial::Pads conv_transpose_pads(const OnnxReader& n, const Shape& x, const std::vector<int64_t>& kernel,
                                       const std::vector<int64_t>& stride, const std::vector<int64_t>& dilation,
                                       const std::vector<int64_t>& output_padding) {
  const size_t dims = kernel.size();
  const std::string auto_pad = n.s("auto_pad", "NOTSET");
  onnx_spatial::Pads p{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  if (auto_pad == "VALID") return p;
  std::vector<int64_t> out;
  if (n.has("output_shape")) {
    out = n.ints("output_shape");
    if (out.size() == dims + 2) out.erase(out.begin(), out.begin() + 2);  // some writers give N and C too
    if (out.size() != dims) n.fail("output_shape has ", out.size(), " values; ", dims, " expected");
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < dims; ++i) out.push_back(x[2 + i] * stride[i]);
  } else if (auto_pad != "NOTSET") {
    n.fail("auto_pad is '", auto_pad, "'; NOTSET, SAME_UPPER, SAME_LOWER or VALID expected");
  } else {
    auto pads = n.ints("pads", std::vector<int64_t>(2 * dims, 0));
    if (pads.size() != 2 * dims) n.fail("pads has ", pads.size(), " values; ", 2 * dims, " expected");
    return {{pads.begin(), pads.begin() + static_cast<long>(dims)}, {pads.begin() + static_cast<long>(dims), pads.end()}};
  }
  auto floor_half = [](int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); };
  for (size_t i = 0; i < dims; ++i) {
    const int64_t total = stride[i] * (x[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilation[i] + 1 - out[i];
    const bool upper = auto_pad == "SAME_UPPER";
    p.begin[i] = upper ? floor_half(total) : total - floor_half(total);
    p.end[i] = total - p.begin[i];
  }
  return p;
}

// The window [begin, begin + out) of each spatial axis of a whole transposed
// convolution y, zeros where it reaches past (uneven or negative pads,
// output_padding), plus the bias.
Tensor cut_transposed(const OnnxReader& n, Tensor y, const onnx_spatial::Pads& p,
                      const std::vector<int64_t>& output_padding, const Tensor& b) {
  using namespace onnx_spatial;
  const size_t dims = static_cast<size_t>(y.dim() - 2);
  Pads border{std::vector<int64_t>(dims, 0), std::vector<int64_t>(dims, 0)};
  std::vector<int64_t> out(dims);
  for (size_t i = 0; i < dims; ++i) {
    const int64_t full = y.shape()[2 + i];
    out[i] = full + output_padding[i] - p.begin[i] - p.end[i];
    if (out[i] <= 0) n.fail("pads ", p.begin[i], " and ", p.end[i], " leave no output on spatial axis ", i);
    border.begin[i] = std::max<int64_t>(0, -p.begin[i]);
    border.end[i] = std::max<int64_t>(0, p.begin[i] + out[i] - full);
  }
  y = pad_spatial(y, border, 0.0);
  for (size_t i = 0; i < dims; ++i) {
    const int64_t start = p.begin[i] + border.begin[i];
    y = y.slice(static_cast<int64_t>(2 + i), start, start + out[i]);
  }
  if (b.defined()) {
    Shape bs(y.dim(), 1);
    bs[1] = b.numel();
    y = y + b.reshape(bs);
  }
  return y.contiguous();
}

std::vector<Tensor> read_conv_transpose(const OnnxReader& n, const std::vector<Tensor>& in) {
  using namespace onnx_spatial;
  const Tensor &x = n.input(in, 0), &w = n.input(in, 1);
  const size_t dims = static_cast<size_t>(x.dim() - 2);
  if (x.dim() == 5) {  // the full transposed convolution, then the crop below
    const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
    if (kernel.size() != 3) n.fail("weight ", shape_str(w.shape()), " does not match input ", shape_str(x.shape()));
    Conv3dOptions full;
    full.stride = spatial_attr(n, "strides", 3, 1);
    full.dilation = spatial_attr(n, "dilations", 3, 1);
    full.groups = n.i("group", 1);
    const auto output_padding = spatial_attr(n, "output_padding", 3, 0);
    const Pads p = conv_transpose_pads(n, x.shape(), kernel, full.stride, full.dilation, output_padding);
    return {cut_transposed(n, conv_transpose3d(x, w, Tensor(), full), p, output_padding, OnnxReader::optional(in, 2))};
  }
  const SpatialRank r = spatial_rank(n, x);
  const std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  if (kernel.size() != dims) n.fail("weight ", shape_str(w.shape()), " does not match input ", shape_str(x.shape()));
  const auto stride = spatial_attr(n, "strides", dims, 1), dilation = spatial_attr(n, "dilations", dims, 1),
             output_padding = spatial_attr(n, "output_padding", dims, 0);
  const Pads p = conv_transpose_pads(n, x.shape(), kernel, stride, dilation, output_padding);
  ConvOptions o;
  o.stride = r.lift(stride, 1);
  o.dilation = r.lift(dilation, 1);
  o.groups = n.i("group", 1);
  bool plain = p.symmetric();
  for (size_t i = 0; i < dims; ++i) plain = plain && p.begin[i] >= 0 && output_padding[i] < std::max(stride[i], dilation[i]);
  if (plain) {
    o.padding = r.lift(p.begin, 0);
    o.output_padding = r.lift(output_padding, 0);
    return {r.lower(conv_transpose2d(r.lift(x), r.lift(w), OnnxReader::optional(in, 2), o))};
  }
  // Uneven (or negative) pads: the whole transposed convolution, then the cut.
  return {cut_transposed(n, r.lower(conv_transpose2d(r.lift(x), r.lift(w), Tensor(), o)), p, output_padding,
                         OnnxReader::optional(in, 2))};
}

// MindSpore's Conv2D: x [N, C, H, W], weight [out, in/group, kh, kw]; stride
// and dilation as (1, 1, h, w), pad (top, bottom, left, right) for
// pad_mode "pad", "same" the output ceil(H / stride) (odd pixel at the end).
std::vector<Tensor> read_mindspore_conv2d(const OnnxReader& n, const std::vector<Tensor>& in) {
  detail::require_nchw(n);
  const Tensor &x = n.input(in, 0), &w = n.input(in, 1);
  if (x.dim() != 4 || w.dim() != 4) n.fail("takes x [N, C, H, W] and weight [out, in, kh, kw], got ", x.meta_str(), " and ", w.meta_str());
  ConvOptions o;
  o.stride = detail::mindspore_hw(n, "stride", 1);
  o.dilation = detail::mindspore_hw(n, "dilation", 1);
  o.groups = n.i("group", 1);
  const std::string mode = detail::mindspore_pad_mode(n, "valid");
  std::vector<int64_t> pads = {0, 0, 0, 0};  // top, bottom, left, right
  if (mode == "pad") pads = n.ints("pad", {0, 0, 0, 0});
  if (mode == "same") pads = detail::same_padding(x.shape(), {w.shape()[2], w.shape()[3]}, o.stride, o.dilation);
  if (pads.size() == 1) pads = {pads[0], pads[0], pads[0], pads[0]};
  if (pads.size() != 4) n.fail("pad should hold 1 or 4 values (top, bottom, left, right), got ", pads.size());
  if (pads[0] == pads[1] && pads[2] == pads[3]) {
    o.padding = {pads[0], pads[2]};
    return {conv2d(x, w, Tensor(), o)};
  }
  return {conv2d(pad(x, {pads[2], pads[3], pads[0], pads[1]}), w, Tensor(), o)};
}

OpDefiner d_conv2d([] {
  OpDef d;
  d.name = "conv2d";
  d.autocast = Autocast::Lower;
  d.inputs = {"x", "weight", "bias?"};
  d.outputs = {"y"};
  // activation=relu: y = relu(conv), in the same kernel call (graph mode's fusion sets it).
  d.attrs = {"stride:ints=[1,1]", "padding:ints=[0,0]", "dilation:ints=[1,1]", "groups:int=1",
             "activation:string=none|relu"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    std::string act = a.get_string("activation", "none");
    KILN_CHECK(act == "none" || act == "relu", "activation must be none or relu, got '", act, "'");
    return infer_conv2d(in, a);
  };
  d.grad = [](const GradContext& c, const Grads& grads) -> Grads {
    const Tensor &x = c.inputs[0], &w = c.inputs[1];
    Tensor gy = grads[0];
    const Attrs& a = c.attrs;
    if (a.get_string("activation", "none") == "relu") gy = call("relu_backward", {gy, c.outputs[0]})[0];
    Grads r(3);
    if (c.needs_grad[0]) r[0] = call("conv2d_input_grad", {gy, w}, with_shape(a, "input_shape", x.shape()))[0];
    if (c.needs_grad[1]) r[1] = call("conv2d_weight_grad", {x, gy}, with_shape(a, "weight_shape", w.shape()))[0];
    if (c.inputs.size() > 2 && c.needs_grad[2]) r[2] = sum(gy, {0, 2, 3});
    return r;
  };
  d.onnx = {{"Conv", "Relu"}, [](OnnxWriter& w) { write_conv(w, false); }};
  d.onnx_import = onnx_reader({"Conv"}, read_conv);
  d.mindspore_import = onnx_reader({"Conv2D"}, read_mindspore_conv2d);
  d.category = "convolution";
  return d;
}());

OpDefiner d_conv2d_input_grad([] {
  OpDef d;
  d.name = "conv2d_input_grad";
  d.inputs = {"grad_y", "weight"};
  d.outputs = {"grad_x"};
  d.attrs = {"input_shape:ints", "stride", "padding", "dilation", "groups"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_geometry(a);
    return {{true, a.get_ints("input_shape"), in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    // Linear in both inputs: its own adjoints are conv2d and conv2d_weight_grad.
    const Attrs& a = c.attrs;
    Grads r(2);
    if (c.needs_grad[0]) r[0] = call("conv2d", {g[0], c.inputs[1]}, geometry(a))[0];
    if (c.needs_grad[1]) r[1] = call("conv2d_weight_grad", {g[0], c.inputs[0]}, with_shape(a, "weight_shape", c.inputs[1].shape()))[0];
    return r;
  };
  d.tags = kTagBackward;
  d.category = "convolution";
  return d;
}());

OpDefiner d_conv2d_weight_grad([] {
  OpDef d;
  d.name = "conv2d_weight_grad";
  d.inputs = {"x", "grad_y"};
  d.outputs = {"grad_weight", "grad_bias?"};
  // with_bias: also the bias gradient (grad_y summed over N, H, W) from the same pass.
  d.attrs = {"weight_shape:ints", "stride", "padding", "dilation", "groups", "with_bias:bool=false"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_geometry(a);
    Shape ws = a.get_ints("weight_shape");
    Metas out{{true, ws, in[0].dtype, in[0].device}};
    if (a.get_bool("with_bias", false)) out.push_back({true, {ws[0]}, in[0].dtype, in[0].device});
    return out;
  };
  d.tags = kTagBackward | kTagNondifferentiable;
  d.category = "convolution";
  return d;
}());

OpDefiner d_conv_transpose2d([] {
  OpDef d;
  d.name = "conv_transpose2d";
  d.autocast = Autocast::Lower;
  d.inputs = {"x", "weight", "bias?"};
  d.outputs = {"y"};
  d.attrs = {"stride:ints=[1,1]", "padding:ints=[0,0]", "output_padding:ints=[0,0]", "dilation:ints=[1,1]",
             "groups:int=1"};
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_geometry(a);
    detail::check_rank(in[0], 4, "input", "N, C, H, W");
    detail::check_rank(in[1], 4, "weight", "in_channels, out_channels/groups, kH, kW");
    detail::check_same_dtype(in, 0, 1);
    const Shape &x = in[0].shape, &w = in[1].shape;
    const Conv2dAttrs c = Conv2dAttrs::of(a);
    const int64_t g = c.groups;
    KILN_CHECK(x[1] == w[0], "input has ", x[1], " channels but weight ", shape_str(w), " expects ", w[0]);
    KILN_CHECK(w[0] % g == 0, "in_channels (", w[0], ") must be divisible by groups (", g, ")");
    const auto &s = c.stride, &p = c.padding, &d = c.dilation;
    auto op = pair_attr(a, "output_padding", 0);
    for (int i = 0; i < 2; ++i)
      KILN_CHECK(op[i] >= 0 && (op[i] < s[i] || op[i] < d[i]), "output_padding ", op[i],
                 " must be smaller than the stride or the dilation");
    int64_t oh = (x[2] - 1) * s[0] - 2 * p[0] + d[0] * (w[2] - 1) + op[0] + 1;
    int64_t ow = (x[3] - 1) * s[1] - 2 * p[1] + d[1] * (w[3] - 1) + op[1] + 1;
    KILN_CHECK(oh > 0 && ow > 0, "output size ", oh, "x", ow, " is not positive; reduce the padding");
    if (in.size() > 2 && in[2].defined)
      KILN_CHECK(in[2].shape == Shape{w[1] * g}, "bias must have shape [", w[1] * g, "], got ", shape_str(in[2].shape));
    return {{true, {x[0], w[1] * g, oh, ow}, in[0].dtype, in[0].device}};
  };
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    const Tensor &x = c.inputs[0], &w = c.inputs[1];
    const Attrs& a = c.attrs;
    Grads r(3);
    if (c.needs_grad[0]) r[0] = call("conv2d", {g[0], w}, geometry(a))[0];
    if (c.needs_grad[1]) r[1] = call("conv2d_weight_grad", {g[0], x}, with_shape(a, "weight_shape", w.shape()))[0];
    if (c.inputs.size() > 2 && c.needs_grad[2]) r[2] = sum(g[0], {0, 2, 3});
    return r;
  };
  d.onnx = {{"ConvTranspose"}, [](OnnxWriter& w) { write_conv(w, true); }};
  d.onnx_import = onnx_reader({"ConvTranspose"}, read_conv_transpose);
  d.category = "convolution";
  return d;
}());

Attrs conv_attrs(const ConvOptions& o) {
  return {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& o) {
  return call1(KILN_OP("conv2d"), {x, weight, bias}, conv_attrs(o));
}

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  KILN_CHECK(x.dim() == 3 && weight.dim() == 3, "conv1d: input must be [N, C, L] and weight [out, in/groups, k], got ",
             x.meta_str(), " and ", weight.meta_str());
  ConvOptions o{{1, stride}, {0, padding}, {1, dilation}, groups, {0, 0}};
  return conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, o).squeeze(2);
}

Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv3dOptions& o) {
  KILN_CHECK(x.dim() == 5 && weight.dim() == 5, "conv3d: input must be [N, C, D, H, W] and weight [out, in/groups, kD, kH, kW], got ",
             x.meta_str(), " and ", weight.meta_str());
  KILN_CHECK(o.stride.size() == 3 && o.padding.size() == 3 && o.dilation.size() == 3,
             "conv3d: stride, padding and dilation take 3 values (D, H, W)");
  const Tensor padded = o.padding[0] ? pad(x, {0, 0, 0, 0, o.padding[0], o.padding[0]}) : x;
  const int64_t n = x.shape()[0], depth = padded.shape()[2], kd = weight.shape()[2];
  const int64_t out_depth = (depth - o.dilation[0] * (kd - 1) - 1) / o.stride[0] + 1;
  KILN_CHECK(out_depth > 0, "conv3d: input ", shape_str(x.shape()), " is too shallow for a kernel of depth ", kd);
  ConvOptions plane{{o.stride[1], o.stride[2]}, {o.padding[1], o.padding[2]}, {o.dilation[1], o.dilation[2]}, o.groups, {0, 0}};
  Tensor y;
  for (int64_t k = 0; k < kd; ++k) {
    // The depth slices tap k reads, as a batch of planes [N * out_depth, C, H, W].
    const int64_t first = k * o.dilation[0];
    const Tensor slices = padded.slice(2, first, first + (out_depth - 1) * o.stride[0] + 1, o.stride[0]).permute({0, 2, 1, 3, 4});
    const Shape& s = slices.shape();
    const Tensor part = conv2d(slices.reshape({n * out_depth, s[2], s[3], s[4]}), weight.select(2, k).contiguous(), Tensor(), plane);
    y = k == 0 ? part : y + part;
  }
  const Shape& ys = y.shape();
  Tensor out = y.reshape({n, out_depth, ys[1], ys[2], ys[3]}).permute({0, 2, 1, 3, 4});
  if (bias.defined()) out = out + bias.reshape({ys[1], 1, 1, 1});
  return out.contiguous();
}

// Each depth tap k: a 2-D transposed convolution of every input depth slice,
// whose results land at depths k * dilation + i * stride of the full output
// (zeros interleaved for the stride, then shifted into place). Then the
// padding is cut from both ends and output_padding added at the far one.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv3dOptions& o) {
  KILN_CHECK(x.dim() == 5 && weight.dim() == 5, "conv_transpose3d: input must be [N, C, D, H, W] and weight [in, "
             "out/groups, kD, kH, kW], got ", x.meta_str(), " and ", weight.meta_str());
  KILN_CHECK(o.stride.size() == 3 && o.padding.size() == 3 && o.dilation.size() == 3 && o.output_padding.size() == 3,
             "conv_transpose3d: stride, padding, dilation and output_padding take 3 values (D, H, W)");
  const int64_t n = x.shape()[0], depth = x.shape()[2], kd = weight.shape()[2], s = o.stride[0];
  const int64_t full = (depth - 1) * s + (kd - 1) * o.dilation[0] + 1;
  const Tensor planes = x.permute({0, 2, 1, 3, 4}).reshape({n * depth, x.shape()[1], x.shape()[3], x.shape()[4]});
  const ConvOptions plane{{o.stride[1], o.stride[2]}, {o.padding[1], o.padding[2]}, {o.dilation[1], o.dilation[2]},
                          o.groups, {o.output_padding[1], o.output_padding[2]}};
  Tensor y;
  for (int64_t k = 0; k < kd; ++k) {
    Tensor part = conv_transpose2d(planes, weight.select(2, k).contiguous(), Tensor(), plane);
    const Shape ps = part.shape();
    part = part.reshape({n, depth, ps[1], ps[2], ps[3]});
    if (s > 1) {
      std::vector<Tensor> spaced(static_cast<size_t>(s), zeros_like(part));
      spaced[0] = part;
      part = stack(spaced, 2).reshape({n, depth * s, ps[1], ps[2], ps[3]}).slice(1, 0, (depth - 1) * s + 1);
    }
    const int64_t front = k * o.dilation[0], back = full - front - part.shape()[1];
    part = pad(part, {0, 0, 0, 0, 0, 0, front, back});
    y = k == 0 ? part : y + part;
  }
  const int64_t out = full - 2 * o.padding[0] + o.output_padding[0];
  KILN_CHECK(out > 0, "conv_transpose3d: padding ", o.padding[0], " leaves no output depth");
  if (o.output_padding[0] > 0) y = pad(y, {0, 0, 0, 0, 0, 0, 0, o.output_padding[0]});
  y = y.slice(1, o.padding[0], o.padding[0] + out).permute({0, 2, 1, 3, 4});
  if (bias.defined()) y = y + bias.reshape({bias.numel(), 1, 1, 1});
  return y.contiguous();
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const ConvOptions& o) {
  Attrs a = conv_attrs(o);
  a.set("output_padding", o.output_padding);
  return call1(KILN_OP("conv_transpose2d"), {x, weight, bias}, a);
}

}  // namespace kiln

// interpolate: resizing the spatial axes of NCHW tensors, nearest or
// (bi)linear, with every coordinate mapping ONNX's Resize names (PyTorch's
// interpolate and Upsample are two of them), and its backward op. The op
// reads ONNX Resize (opsets 10 on) and Upsample (7 to 9) and writes Resize.
#include <cmath>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

const char* kModes[] = {"nearest", "linear"};
const char* kCoordinates[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                              "asymmetric", "tf_half_pixel_for_nn"};
const char* kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

template <size_t N>
void check_one_of(const std::string& value, const char* (&allowed)[N], const char* what) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += std::string(list.empty() ? "" : ", ") + a;
  }
  KILN_FAIL(what, " '", value, "' is not one of ", list);
}

const std::vector<std::string> kAttrs = {"size:ints", "mode:string=nearest", "coordinates:string=half_pixel",
                                         "nearest_mode:string=round_prefer_floor", "scales:floats?"};

Metas infer_interpolate(const Metas& in, const Attrs& a) {
  detail::check_rank(in[0], 4, "input", "N, C, H, W");
  detail::check_floating(in[0], "input");
  const auto size = a.get_ints("size");
  KILN_CHECK(size.size() == 2 && size[0] > 0 && size[1] > 0, "size must be two positive values (H, W), got ",
             shape_str(size));
  const auto scales = a.get_floats("scales", {});
  KILN_CHECK(scales.empty() || (scales.size() == 2 && scales[0] > 0 && scales[1] > 0),
             "scales must be two positive values (H, W)");
  check_one_of(a.get_string("mode", "nearest"), kModes, "mode");
  check_one_of(a.get_string("coordinates", "half_pixel"), kCoordinates, "coordinates");
  check_one_of(a.get_string("nearest_mode", "round_prefer_floor"), kNearestModes, "nearest_mode");
  Shape y = in[0].shape;
  y[2] = size[0];
  y[3] = size[1];
  return {{true, y, in[0].dtype, in[0].device}};
}

// ONNX Resize at opset 13+: X, roi (unused), scales or sizes.
void write_resize(OnnxWriter& w) {
  const Attrs& a = w.attrs();
  Attrs attrs{{"mode", a.get_string("mode", "nearest")},
              {"coordinate_transformation_mode", a.get_string("coordinates", "half_pixel")},
              {"nearest_mode", a.get_string("nearest_mode", "round_prefer_floor")}};
  const Shape& x = w.in_shape();
  const auto scales = a.get_floats("scales", {});
  if (!scales.empty()) {
    Tensor s = Tensor::empty({4});
    const float v[4] = {1, 1, static_cast<float>(scales[0]), static_cast<float>(scales[1])};
    std::copy(v, v + 4, s.data<float>());
    w.node("Resize", {w.in(0), "", w.initializer(s, "scales")}, {w.out()}, attrs);
    return;
  }
  const auto size = a.get_ints("size");
  w.node("Resize", {w.in(0), "", "", w.ints({x[0], x[1], size[0], size[1]}, "sizes")}, {w.out()}, attrs);
}

// Reads ONNX Resize (X, roi, scales, sizes; opset 10: X, scales) and
// Upsample (X, scales; opset 7: a scales attribute).
std::vector<Tensor> read_resize(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  if (x.dim() != 4) n.unsupported("only 4-D (N, C, H, W) inputs can be resized, this one is ", shape_str(x.shape()));
  const bool upsample = n.op_type() == "Upsample";
  const int opset = n.opset();
  std::string mode = n.s("mode", "nearest");
  if (mode == "bilinear") mode = "linear";  // Upsample-7's name
  if (mode != "nearest" && mode != "linear") n.unsupported("mode '", mode, "' is not supported (nearest and linear are)");
  const bool legacy = upsample || opset < 11;  // Upsample and Resize-10: asymmetric, nearest rounds down
  const std::string coordinates = legacy ? "asymmetric" : n.s("coordinate_transformation_mode", "half_pixel");
  if (coordinates == "tf_crop_and_resize") n.unsupported("coordinate_transformation_mode tf_crop_and_resize is not supported");
  const std::string nearest = legacy ? "floor" : n.s("nearest_mode", "round_prefer_floor");
  if (n.i("antialias", 0)) n.unsupported("antialias=1 is not supported");
  if (!n.ints("axes", {}).empty()) n.unsupported("the axes attribute is not supported; give all four scales or sizes");
  if (n.s("keep_aspect_ratio_policy", "stretch") != "stretch") n.unsupported("keep_aspect_ratio_policy other than stretch");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  auto values = [](const Tensor& t) { return t.to(DType::Float64).contiguous().to_vector<double>(); };
  if (upsample && opset < 9) {
    scales = n.floats("scales");
  } else {
    const size_t scales_at = upsample || opset < 11 ? 1 : 2;
    if (scales_at < in.size() && in[scales_at].defined() && in[scales_at].numel() > 0) scales = values(in[scales_at]);
    if (!upsample && opset >= 11 && in.size() > 3 && in[3].defined() && in[3].numel() > 0)
      sizes = in[3].to(DType::Int64).contiguous().to_vector<int64_t>();
  }
  if (scales.empty() == sizes.empty()) n.fail("needs exactly one of scales and sizes");
  Attrs a{{"mode", mode}, {"coordinates", coordinates}, {"nearest_mode", nearest}};
  if (!scales.empty()) {
    if (scales.size() != 4) n.fail("scales has ", scales.size(), " values; 4 expected");
    if (scales[0] != 1 || scales[1] != 1) n.unsupported("only the spatial axes can be resized (scales for N and C must be 1)");
    a.set("size", std::vector<int64_t>{static_cast<int64_t>(std::floor(x.shape()[2] * scales[2])),
                                      static_cast<int64_t>(std::floor(x.shape()[3] * scales[3]))});
    a.set("scales", std::vector<double>{scales[2], scales[3]});
  } else {
    if (sizes.size() != 4) n.fail("sizes has ", sizes.size(), " values; 4 expected");
    if (sizes[0] != x.shape()[0] || sizes[1] != x.shape()[1])
      n.unsupported("only the spatial axes can be resized (sizes for N and C must be the input's)");
    a.set("size", std::vector<int64_t>{sizes[2], sizes[3]});
  }
  return call(OpRegistry::instance().get("interpolate"), {x}, a);
}

OpDefiner d_interpolate([] {
  OpDef d;
  d.name = "interpolate";
  d.inputs = {"x"};
  d.outputs = {"y"};
  d.attrs = kAttrs;
  d.infer = infer_interpolate;
  d.grad = [](const GradContext& c, const Grads& g) -> Grads {
    return {call("interpolate_backward", {g[0], c.inputs[0]}, c.attrs)[0]};
  };
  d.onnx = {{"Resize"}, write_resize};
  d.onnx_import = onnx_reader({"Resize", "Upsample"}, read_resize, {1, 2, 3});
  d.category = "resize";
  return d;
}());

OpDefiner d_interpolate_bw([] {
  OpDef d;
  d.name = "interpolate_backward";
  d.inputs = {"grad_y", "x"};
  d.outputs = {"grad_x"};
  d.attrs = kAttrs;
  d.infer = [](const Metas& in, const Attrs&) -> Metas { return {in[1]}; };
  d.tags = kTagBackward | kTagNondifferentiable;
  d.category = "resize";
  return d;
}());

}  // namespace

namespace {
// PyTorch's interpolate as attributes: nearest picks floor(dst * in / out);
// bilinear maps pixel centres (or corners, with align_corners).
Attrs torch_interpolate(std::vector<int64_t> size, const std::string& mode, bool align_corners) {
  const bool nearest = mode == "nearest";
  KILN_CHECK(nearest || mode == "linear" || mode == "bilinear", "interpolate: mode '", mode,
             "' is not one of nearest, bilinear (linear)");
  KILN_CHECK(!(nearest && align_corners), "interpolate: align_corners is only for bilinear, as in PyTorch");
  return {{"size", std::move(size)},
          {"mode", std::string(nearest ? "nearest" : "linear")},
          {"coordinates", std::string(nearest ? "asymmetric" : align_corners ? "align_corners" : "pytorch_half_pixel")},
          {"nearest_mode", std::string("floor")}};
}
}  // namespace

Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode, bool align_corners) {
  return call1(KILN_OP("interpolate"), {x}, torch_interpolate(std::move(size), mode, align_corners));
}

Tensor interpolate(const Tensor& x, double scale_factor, const std::string& mode, bool align_corners) {
  KILN_CHECK(scale_factor > 0, "interpolate: scale_factor must be positive, got ", scale_factor);
  KILN_CHECK(x.dim() == 4, "interpolate: input must have rank 4 (N, C, H, W), got ", x.meta_str());
  Attrs a = torch_interpolate({static_cast<int64_t>(std::floor(x.shape()[2] * scale_factor)),
                               static_cast<int64_t>(std::floor(x.shape()[3] * scale_factor))},
                              mode, align_corners);
  // Pixel centres map by the factor itself, as in PyTorch; corners by the sizes.
  if (!align_corners) a.set("scales", std::vector<double>{scale_factor, scale_factor});
  return call1(KILN_OP("interpolate"), {x}, a);
}

}  // namespace kiln

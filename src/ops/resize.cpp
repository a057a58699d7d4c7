// interpolate: resizing the spatial axes of NCHW tensors, nearest, (bi)linear
// or (bi)cubic, optionally antialiased, with every coordinate mapping ONNX's
// Resize names (PyTorch's interpolate and Upsample are some of them), and its
// backward op. The op reads ONNX Resize (opsets 10 on; scales or sizes for
// some axes, aspect-ratio policies, crops) and Upsample (7 to 9) and writes Resize.
#include <array>
#include <cmath>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

const char* kModes[] = {"nearest", "linear", "cubic"};
const char* kCoordinates[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                              "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
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

// roi (tf_crop_and_resize): the start and end of H and W, as fractions of
// the input: {h0, w0, h1, w1}; outside it the extrapolation value.
const std::vector<std::string> kAttrs = {"size:ints", "mode:string=nearest", "coordinates:string=half_pixel",
                                         "nearest_mode:string=round_prefer_floor", "scales:floats?",
                                         "cubic_coeff_a:float=-0.75", "exclude_outside:bool=false",
                                         "antialias:bool=false", "roi:floats?", "extrapolation_value:float=0"};

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
  KILN_CHECK(a.get_string("coordinates", "half_pixel") != "tf_crop_and_resize" || a.get_floats("roi", {}).size() == 4,
             "coordinates tf_crop_and_resize needs roi: four values (H start, W start, H end, W end)");
  Shape y = in[0].shape;
  y[2] = size[0];
  y[3] = size[1];
  return {{true, y, in[0].dtype, in[0].device}};
}

// ONNX Resize at opset 13+: X, roi (unused), scales or sizes.
void write_resize(OnnxWriter& w) {
  const Attrs& a = w.attrs();
  const std::string mode = a.get_string("mode", "nearest"), coordinates = a.get_string("coordinates", "half_pixel");
  Attrs attrs{{"mode", mode},
              {"coordinate_transformation_mode", coordinates},
              {"nearest_mode", a.get_string("nearest_mode", "round_prefer_floor")}};
  if (mode == "cubic") {
    attrs.set("cubic_coeff_a", a.get_float("cubic_coeff_a", -0.75));
    attrs.set("exclude_outside", a.get_bool("exclude_outside", false));
  }
  if (a.get_bool("antialias", false)) {
    KILN_CHECK(w.opset() >= 18, "export: an antialiased resize is ONNX Resize with antialias, from opset 18; export "
               "with opset 18 or later");
    attrs.set("antialias", true);
  }
  std::string roi;
  if (coordinates == "tf_crop_and_resize") {
    const auto r = a.get_floats("roi", {});
    Tensor t = Tensor::empty({8});
    const float v[8] = {0, 0, static_cast<float>(r[0]), static_cast<float>(r[1]),
                        1, 1, static_cast<float>(r[2]), static_cast<float>(r[3])};
    std::copy(v, v + 8, t.data<float>());
    roi = w.initializer(t, "roi");
    attrs.set("extrapolation_value", a.get_float("extrapolation_value", 0.0));
  }
  const Shape& x = w.in_shape();
  const auto scales = a.get_floats("scales", {});
  if (!scales.empty()) {
    Tensor s = Tensor::empty({4});
    const float v[4] = {1, 1, static_cast<float>(scales[0]), static_cast<float>(scales[1])};
    std::copy(v, v + 4, s.data<float>());
    w.node("Resize", {w.in(0), roi, w.initializer(s, "scales")}, {w.out()}, attrs);
    return;
  }
  const auto size = a.get_ints("size");
  w.node("Resize", {w.in(0), roi, "", w.ints({x[0], x[1], size[0], size[1]}, "sizes")}, {w.out()}, attrs);
}

// Reads ONNX Resize (X, roi, scales, sizes; opset 10: X, scales) and
// Upsample (X, scales; opset 7: a scales attribute). Scales, sizes and roi
// may cover only the axes the `axes` attribute lists (opset 18 on).
std::vector<Tensor> read_resize(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  if (x.dim() != 4) n.unsupported("only 4-D (N, C, H, W) inputs can be resized, this one is ", shape_str(x.shape()));
  const bool upsample = n.op_type() == "Upsample";
  const int opset = n.opset();
  std::string mode = n.s("mode", "nearest");
  if (mode == "bilinear") mode = "linear";  // Upsample-7's name
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    n.fail("mode '", mode, "' is not one of nearest, linear, cubic");
  const bool legacy = upsample || opset < 11;  // Upsample and Resize-10: asymmetric, nearest rounds down
  const std::string coordinates = legacy ? "asymmetric" : n.s("coordinate_transformation_mode", "half_pixel");
  const std::string nearest = legacy ? "floor" : n.s("nearest_mode", "round_prefer_floor");
  // The axes that scales, sizes and roi speak of; the others keep their size.
  std::vector<int64_t> axes = n.ints("axes", {});
  if (axes.empty()) axes = {0, 1, 2, 3};
  for (int64_t& axis : axes) axis = n.axis(axis, 4);
  std::vector<double> scales;
  std::array<int64_t, 4> sizes{};
  bool by_sizes = false;
  auto values = [](const Tensor& t) { return t.to(DType::Float64).contiguous().to_vector<double>(); };
  auto full = [&](const std::vector<double>& given, double other, const char* what) {
    if (given.size() != axes.size()) n.fail(what, " has ", given.size(), " values for ", axes.size(), " axes");
    std::vector<double> all(4, other);
    for (size_t i = 0; i < axes.size(); ++i) all[axes[i]] = given[i];
    return all;
  };
  if (upsample && opset < 9) {
    scales = n.floats("scales");
  } else {
    const size_t scales_at = upsample || opset < 11 ? 1 : 2;
    if (scales_at < in.size() && in[scales_at].defined() && in[scales_at].numel() > 0) scales = full(values(in[scales_at]), 1, "scales");
    if (!upsample && opset >= 11 && in.size() > 3 && in[3].defined() && in[3].numel() > 0) {
      const std::vector<double> all = full(values(in[3]), 0, "sizes");
      for (size_t d = 0; d < 4; ++d) sizes[d] = all[d] > 0 ? static_cast<int64_t>(all[d]) : x.shape()[d];
      by_sizes = true;
    }
  }
  if (scales.empty() != by_sizes) n.fail("needs exactly one of scales and sizes");
  // not_larger / not_smaller: one scale for the listed axes, the largest (or
  // smallest) that keeps each within (or beyond) its size.
  const std::string policy = n.s("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
    n.fail("keep_aspect_ratio_policy '", policy, "' is not one of stretch, not_larger, not_smaller");
  if (policy != "stretch" && by_sizes) {
    double scale = policy == "not_larger" ? 1e300 : 0;
    for (int64_t axis : axes) {
      const double r = static_cast<double>(sizes[axis]) / static_cast<double>(x.shape()[axis]);
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
    scales.assign(4, 1.0);
    for (int64_t axis : axes) {
      scales[axis] = scale;
      sizes[axis] = static_cast<int64_t>(std::nearbyint(scale * static_cast<double>(x.shape()[axis])));
    }
  }
  Attrs a{{"mode", mode}, {"coordinates", coordinates}, {"nearest_mode", nearest},
          {"cubic_coeff_a", n.f("cubic_coeff_a", -0.75)}, {"exclude_outside", n.i("exclude_outside", 0) != 0},
          {"antialias", n.i("antialias", 0) != 0}, {"extrapolation_value", n.f("extrapolation_value", 0.0)}};
  if (coordinates == "tf_crop_and_resize") {
    if (in.size() < 2 || !in[1].defined() || in[1].numel() == 0) n.fail("tf_crop_and_resize needs the roi input");
    const std::vector<double> roi = values(in[1]);
    if (roi.size() != 2 * axes.size()) n.fail("roi has ", roi.size(), " values; ", 2 * axes.size(), " expected");
    const std::vector<double> starts = full({roi.begin(), roi.begin() + axes.size()}, 0, "roi");
    const std::vector<double> ends = full({roi.begin() + axes.size(), roi.end()}, 1, "roi");
    if (starts[0] != 0 || starts[1] != 0 || ends[0] != 1 || ends[1] != 1)
      n.unsupported("only the spatial axes can be cropped (roi for N and C must be 0 to 1)");
    a.set("roi", std::vector<double>{starts[2], starts[3], ends[2], ends[3]});
  }
  if (by_sizes && policy == "stretch") {
    if (sizes[0] != x.shape()[0] || sizes[1] != x.shape()[1])
      n.unsupported("only the spatial axes can be resized (sizes for N and C must be the input's)");
    a.set("size", std::vector<int64_t>{sizes[2], sizes[3]});
  } else {
    if (scales.size() != 4) n.fail("scales has ", scales.size(), " values; 4 expected");
    if (scales[0] != 1 || scales[1] != 1) n.unsupported("only the spatial axes can be resized (scales for N and C must be 1)");
    if (!by_sizes)
      for (size_t d = 2; d < 4; ++d) sizes[d] = static_cast<int64_t>(std::floor(x.shape()[d] * scales[d]));
    a.set("size", std::vector<int64_t>{sizes[2], sizes[3]});
    a.set("scales", std::vector<double>{scales[2], scales[3]});
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
// bilinear and bicubic (Keys' kernel with a = -0.75, edge pixels repeated)
// map pixel centres (or corners, with align_corners).
Attrs torch_interpolate(std::vector<int64_t> size, const std::string& mode, bool align_corners) {
  const bool nearest = mode == "nearest", cubic = mode == "bicubic" || mode == "cubic";
  KILN_CHECK(nearest || cubic || mode == "linear" || mode == "bilinear", "interpolate: mode '", mode,
             "' is not one of nearest, bilinear (linear), bicubic (cubic)");
  KILN_CHECK(!(nearest && align_corners), "interpolate: align_corners is only for bilinear and bicubic, as in PyTorch");
  return {{"size", std::move(size)},
          {"mode", std::string(nearest ? "nearest" : cubic ? "cubic" : "linear")},
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

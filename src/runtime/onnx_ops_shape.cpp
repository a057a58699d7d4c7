// ONNX shape ops that are compositions of Kiln ops or values of the model:
// Tile, Shape, Size, Constant, ConstantOfShape, Range, DepthToSpace,
// SpaceToDepth (the others are read by their ops: Reshape by view, ...).
#include <algorithm>
#include <cmath>

#include "kiln/functional.h"
#include "kiln/registry.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

Tensor int64_tensor(const std::vector<int64_t>& v) { return from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

std::vector<Tensor> tile_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  auto repeats = int_values(n, input(n, in, 1), "repeats");
  if (static_cast<int64_t>(repeats.size()) != x.dim()) n.fail("repeats has ", repeats.size(), " values for rank ", x.dim());
  Shape tiled = x.shape();
  for (size_t i = 0; i < tiled.size(); ++i) {
    if (repeats[i] > (int64_t{1} << 28)) n.fail("repeats ", repeats[i], " is too large");
    tiled[i] *= std::max<int64_t>(repeats[i], 0);
  }
  n.check_created_size(tiled);
  for (int64_t ax = 0; ax < x.dim(); ++ax) {
    if (repeats[ax] < 0) n.fail("repeats must not be negative");
    if (repeats[ax] == 1) continue;
    x = repeats[ax] == 0 ? x.slice(ax, 0, 0) : concat(std::vector<Tensor>(repeats[ax], x), ax);
  }
  return {x + scalar_like(0, x)};
}

std::vector<Tensor> shape_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Shape& s = input(n, in, 0).shape();
  int64_t r = static_cast<int64_t>(s.size());
  int64_t start = n.i("start", 0), end = n.i("end", r);
  start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
  end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
  return {int64_tensor(std::vector<int64_t>(s.begin() + start, s.begin() + std::max(start, end)))};
}

std::vector<Tensor> constant_op(const OnnxNode& n, const std::vector<Tensor>&) {
  if (const auto* t = n.tensor("value")) return {onnx_io::from_proto(*t, n.where())};
  if (n.has("value_float")) return {scalar_tensor(n.f("value_float", 0), DType::Float32)};
  if (n.has("value_int")) return {scalar_tensor(static_cast<double>(n.i("value_int", 0)), DType::Int64)};
  if (n.has("value_ints")) return {int64_tensor(n.ints("value_ints"))};
  if (n.has("value_floats")) {
    auto v = n.floats("value_floats");
    return {from_vector(std::vector<float>(v.begin(), v.end()), Shape{static_cast<int64_t>(v.size())})};
  }
  n.unsupported("only tensor, float and int constants are supported (not strings or sparse tensors)");
}

std::vector<Tensor> constant_of_shape(const OnnxNode& n, const std::vector<Tensor>& in) {
  Shape shape = int_values(n, input(n, in, 0), "shape");
  n.check_created_size(shape);
  double value = 0;
  DType dtype = DType::Float32;
  if (const auto* t = n.tensor("value")) {
    Tensor v = onnx_io::from_proto(*t, n.where());
    if (v.numel() != 1) n.fail("value must hold one element");
    dtype = v.dtype();
    value = v.to(DType::Float64).to_vector<double>()[0];
  }
  return {full(shape, value, dtype)};
}

std::vector<Tensor> range_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  double start = scalar_value(n, input(n, in, 0), "start"), limit = scalar_value(n, input(n, in, 1), "limit"),
         delta = scalar_value(n, input(n, in, 2), "delta");
  if (delta == 0) n.fail("delta cannot be 0");
  double steps = std::ceil((limit - start) / delta);
  if (!(steps < static_cast<double>(int64_t{1} << 28))) n.fail("Range(", start, ", ", limit, ", ", delta, ") is too long");
  int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = start + static_cast<double>(i) * delta;
  return {cast(from_vector(v, Shape{count}), in[0].dtype())};
}

std::vector<Tensor> depth_to_space(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (x.dim() != 4) n.fail("input must be [N, C, H, W], got ", shape_str(x.shape()));
  int64_t b = n.required_i("blocksize"), N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (b <= 0 || C % (b * b)) n.fail("channels ", C, " are not divisible by blocksize^2 (", b * b, ")");
  bool crd = n.s("mode", "DCR") == "CRD";
  Tensor t = crd ? x.reshape({N, C / (b * b), b, b, H, W}).permute({0, 1, 4, 2, 5, 3})
                 : x.reshape({N, b, b, C / (b * b), H, W}).permute({0, 3, 4, 1, 5, 2});
  return {t.reshape({N, C / (b * b), H * b, W * b})};
}

std::vector<Tensor> space_to_depth(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  if (x.dim() != 4) n.fail("input must be [N, C, H, W], got ", shape_str(x.shape()));
  int64_t b = n.required_i("blocksize"), N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], W = x.shape()[3];
  if (b <= 0 || H % b || W % b) n.fail("height and width must be divisible by blocksize ", b);
  Tensor t = x.reshape({N, C, H / b, b, W / b, b}).permute({0, 3, 5, 1, 2, 4});
  return {t.reshape({N, C * b * b, H / b, W / b})};
}

// GatherND and ScatterND: index tuples into the leading axes (kiln::gather_nd, scatter_nd).
std::vector<Tensor> gather_nd_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  return {gather_nd(input(n, in, 0), input(n, in, 1), n.i("batch_dims", 0))};
}

std::vector<Tensor> scatter_nd_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const std::string reduction = n.s("reduction", "none");
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" && reduction != "min")
    n.fail("reduction '", reduction, "' is not one of none, add, mul, max, min");
  return {scatter_nd(input(n, in, 0), input(n, in, 1), input(n, in, 2), reduction)};
}

std::vector<Tensor> einsum_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  std::vector<Tensor> operands;
  for (size_t i = 0; i < in.size(); ++i) operands.push_back(input(n, in, i));
  return {einsum(n.s("equation", ""), operands)};
}

}  // namespace

void add_shape_converters(ConverterTable& t) {
  t["Tile"] = tile_op;
  t["Shape"] = shape_op;
  t["Size"] = [](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {scalar_tensor(static_cast<double>(input(n, in, 0).numel()), DType::Int64)};
  };
  t["Constant"] = constant_op;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range_op;
  t["DepthToSpace"] = depth_to_space;
  t["SpaceToDepth"] = space_to_depth;
  t["GatherND"] = gather_nd_op;
  t["ScatterND"] = scatter_nd_op;
  t["Einsum"] = einsum_op;
}

}  // namespace kiln::runtime

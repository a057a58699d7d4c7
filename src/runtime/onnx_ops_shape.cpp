// ONNX shape ops: reshaping, joining, slicing, indexing, constants.
#include <algorithm>
#include <cmath>

#include "kiln/functional.h"
#include "kiln/registry.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

Tensor int64_tensor(const std::vector<int64_t>& v) { return from_vector(v, Shape{static_cast<int64_t>(v.size())}); }

// Axes from the input (opset >= `since`) or the attribute (before it).
std::vector<int64_t> axes_of(const OnnxNode& n, const std::vector<Tensor>& in, size_t index, int since) {
  if (n.opset() >= since) {
    if (in.size() > index && in[index].defined()) return int_values(n, in[index], "axes");
    return {};
  }
  return n.ints("axes");
}

std::vector<Tensor> reshape_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  std::vector<int64_t> shape = n.opset() >= 5 ? int_values(n, input(n, in, 1), "shape") : n.ints("shape");
  bool allow_zero = n.i("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (static_cast<int64_t>(i) >= x.dim()) n.fail("shape ", shape_str(shape), " copies axis ", i, " that ", shape_str(x.shape()), " lacks");
      shape[i] = x.shape()[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) n.fail("shape ", shape_str(shape), " has more than one -1");
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      n.fail("shape ", shape_str(shape), " has a negative size");
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x.numel() % known != 0) n.fail("cannot reshape ", shape_str(x.shape()), " to ", shape_str(shape));
    shape[infer] = x.numel() / known;
  }
  return {x.reshape(shape)};
}

std::vector<Tensor> flatten_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t axis = n.i("axis", 1);
  if (axis < 0) axis += x.dim();
  if (axis < 0 || axis > x.dim()) n.fail("axis ", n.i("axis", 1), " is out of range for rank ", x.dim());
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[i];
  int64_t inner = 1;
  for (int64_t i = axis; i < x.dim(); ++i) inner *= x.shape()[i];
  return {x.reshape({outer, inner})};
}

std::vector<Tensor> squeeze_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  auto axes = axes_of(n, in, 1, 13);
  std::vector<bool> drop(static_cast<size_t>(x.dim()), axes.empty());
  if (axes.empty())
    for (int64_t i = 0; i < x.dim(); ++i) drop[i] = x.shape()[i] == 1;
  for (int64_t a : axes) {
    int64_t ax = normalize_axis(n, a, x.dim());
    if (x.shape()[ax] != 1) n.fail("cannot squeeze axis ", a, " of size ", x.shape()[ax]);
    drop[ax] = true;
  }
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!drop[i]) s.push_back(x.shape()[i]);
  return {x.reshape(s)};
}

std::vector<Tensor> unsqueeze_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  auto axes = axes_of(n, in, 1, 13);
  int64_t rank = x.dim() + static_cast<int64_t>(axes.size());
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    int64_t ax = normalize_axis(n, a, rank);
    if (added[ax]) n.fail("axis ", a, " is given twice");
    added[ax] = true;
  }
  Shape s;
  int64_t next = 0;
  for (int64_t i = 0; i < rank; ++i) s.push_back(added[i] ? 1 : x.shape()[next++]);
  return {x.reshape(s)};
}

std::vector<Tensor> transpose_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  std::vector<int64_t> perm = n.ints("perm");
  if (perm.empty())
    for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
  return {x.permute(perm)};
}

std::vector<Tensor> concat_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  if (in.empty()) n.fail("Concat needs at least one input");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < in.size(); ++i) parts.push_back(input(n, in, i));
  return {concat(parts, normalize_axis(n, n.required_i("axis"), parts[0].dim()))};
}

std::vector<Tensor> split_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t axis = normalize_axis(n, n.i("axis", 0), x.dim());
  std::vector<int64_t> sizes = n.opset() >= 13 ? (in.size() > 1 && in[1].defined() ? int_values(n, in[1], "split")
                                                                                     : std::vector<int64_t>{})
                                               : n.ints("split");
  if (sizes.empty()) {
    int64_t parts = static_cast<int64_t>(n.num_outputs()), dim = x.shape()[axis];
    int64_t each = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  }
  return split(x, sizes, axis);
}

std::vector<Tensor> slice_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.ints("starts");
    ends = n.ints("ends");
    axes = n.ints("axes");
  } else {
    starts = int_values(n, input(n, in, 1), "starts");
    ends = int_values(n, input(n, in, 2), "ends");
    if (in.size() > 3 && in[3].defined()) axes = int_values(n, in[3], "axes");
    if (in.size() > 4 && in[4].defined()) steps = int_values(n, in[4], "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.fail("starts, ends, axes and steps must have the same length");
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t ax = normalize_axis(n, axes[i], x.dim()), dim = x.shape()[ax], step = steps[i];
    if (step == 0) n.fail("a slice step cannot be 0");
    int64_t start = starts[i], end = ends[i];
    if (step > 0) {
      x = x.slice(ax, std::clamp<int64_t>(start, -dim - 1, dim), std::clamp<int64_t>(end, -dim - 1, dim), step);
      continue;
    }
    // Negative steps: the positions, read backwards, as an index.
    start = start < 0 ? start + dim : start;
    end = end < 0 ? end + dim : end;
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    std::vector<int64_t> idx;
    for (int64_t p = start; p > end; p += step) idx.push_back(p);
    x = index_select(x, ax, int64_tensor(idx));
  }
  return {x};
}

// Negative indices count from the end of `dim`.
Tensor wrap_indices(const Tensor& idx, int64_t dim) {
  Tensor i = idx.dtype() == DType::Int64 ? idx : cast(idx, DType::Int64);
  return where(lt(i, zeros({}, DType::Int64)), i + scalar_tensor(static_cast<double>(dim), DType::Int64), i);
}

std::vector<Tensor> gather_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const Tensor& idx = input(n, in, 1);
  int64_t axis = normalize_axis(n, n.i("axis", 0), x.dim());
  Shape out(x.shape().begin(), x.shape().begin() + axis);
  out.insert(out.end(), idx.shape().begin(), idx.shape().end());
  out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
  Tensor flat = wrap_indices(idx, x.shape()[axis]).reshape({idx.numel()});
  if (axis == 0 && x.dim() == 2 && is_floating(x.dtype())) return {embedding(x, flat).reshape(out)};
  return {index_select(x, axis, flat).reshape(out)};
}

std::vector<Tensor> gather_elements(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t axis = normalize_axis(n, n.i("axis", 0), x.dim());
  return {gather(x, axis, wrap_indices(input(n, in, 1), x.shape()[axis]))};
}

Shape broadcast_shapes(const OnnxNode& n, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())], db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) n.fail("shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<Tensor> expand_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  Shape target = broadcast_shapes(n, x.shape(), int_values(n, input(n, in, 1), "shape"));
  check_created_size(n, target);
  Shape lifted(target.size() - x.shape().size(), 1);
  lifted.insert(lifted.end(), x.shape().begin(), x.shape().end());
  return {x.reshape(lifted).expand(target).contiguous()};
}

std::vector<Tensor> tile_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  Tensor x = input(n, in, 0);
  auto repeats = int_values(n, input(n, in, 1), "repeats");
  if (static_cast<int64_t>(repeats.size()) != x.dim()) n.fail("repeats has ", repeats.size(), " values for rank ", x.dim());
  Shape tiled = x.shape();
  for (size_t i = 0; i < tiled.size(); ++i) {
    if (repeats[i] > (int64_t{1} << 28)) n.fail("repeats ", repeats[i], " is too large");
    tiled[i] *= std::max<int64_t>(repeats[i], 0);
  }
  check_created_size(n, tiled);
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
  check_created_size(n, shape);
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

std::vector<Tensor> pad_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  std::string mode = n.s("mode", "constant");
  if (mode != "constant" && mode != "reflect") n.unsupported("pad mode '", mode, "' is not supported (constant and reflect are)");
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset() < 11) {
    pads = n.ints("pads");
    value = n.f("value", 0);
  } else {
    pads = int_values(n, input(n, in, 1), "pads");
    if (in.size() > 2 && in[2].defined()) value = scalar_value(n, in[2], "constant_value");
    if (in.size() > 3 && in[3].defined()) n.unsupported("the axes input is not supported");
  }
  int64_t r = x.dim();
  if (static_cast<int64_t>(pads.size()) != 2 * r) n.fail("pads has ", pads.size(), " values for rank ", r);
  std::vector<int64_t> kiln_pads;
  for (int64_t ax = r - 1; ax >= 0; --ax) {
    if (pads[ax] < 0 || pads[r + ax] < 0) n.unsupported("negative pads are not supported");
    kiln_pads.push_back(pads[ax]);
    kiln_pads.push_back(pads[r + ax]);
  }
  return {pad(x, kiln_pads, mode, value)};
}

std::vector<Tensor> trilu(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t k = in.size() > 1 && in[1].defined() ? static_cast<int64_t>(scalar_value(n, in[1], "k")) : 0;
  return {n.i("upper", 1) ? triu(x, k) : tril(x, k)};
}

std::vector<Tensor> cumsum_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  int64_t axis = normalize_axis(n, static_cast<int64_t>(scalar_value(n, input(n, in, 1), "axis")), x.dim());
  bool reverse = n.i("reverse", 0) != 0;
  Tensor y = call1(OpRegistry::instance().get("cumsum"), {x}, Attrs{{"axis", axis}, {"reverse", reverse}});
  if (n.i("exclusive", 0)) y = y - x;
  return {y};
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

// OneHot(indices, depth, values = [off, on]) along `axis` (default -1, a new
// last axis). Negative indices count from depth; indices out of range give a
// row of off values. The output takes the values' dtype.
std::vector<Tensor> one_hot_op(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& raw = input(n, in, 0);
  int64_t depth = static_cast<int64_t>(scalar_value(n, input(n, in, 1), "depth"));
  if (depth <= 0) n.fail("depth must be positive, got ", depth);
  const Tensor& values = input(n, in, 2);
  if (values.numel() != 2) n.fail("values must hold [off_value, on_value], got shape ", shape_str(values.shape()));
  Tensor i = wrap_indices(is_floating(raw.dtype()) ? cast(raw, DType::Int64) : raw, depth);
  Tensor zero = zeros({}, DType::Int64);
  Tensor valid = where(ge(i, zero), lt(i, scalar_tensor(static_cast<double>(depth), DType::Int64)), zeros({}, DType::Bool));
  Tensor hot = one_hot(where(valid, i, zero), depth);
  Shape with_class = i.shape();
  with_class.push_back(1);
  Tensor on = gt(hot * cast(valid, DType::Int64).reshape(with_class), zero);
  Tensor flat = values.reshape({2});
  Tensor y = where(on, flat.slice(0, 1, 2).reshape({}), flat.slice(0, 0, 1).reshape({}));
  int64_t rank = y.dim(), axis = normalize_axis(n, n.i("axis", -1), rank);
  if (axis == rank - 1) return {y};
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank - 1; ++d) {
    if (d == axis) order.push_back(rank - 1);
    order.push_back(d);
  }
  return {y.permute(order).contiguous()};
}

// ScatterElements(data, indices, updates) along `axis`, with reduction none
// (the updates replace) or add. With repeated indices ONNX leaves "none"
// undefined; here they add up.
std::vector<Tensor> scatter_elements(const OnnxNode& n, const std::vector<Tensor>& in) {
  const Tensor& x = input(n, in, 0);
  const Tensor& updates = input(n, in, 2);
  int64_t axis = normalize_axis(n, n.i("axis", 0), x.dim());
  Tensor idx = wrap_indices(input(n, in, 1), x.shape()[axis]);
  if (idx.shape() != updates.shape())
    n.fail("indices ", shape_str(idx.shape()), " and updates ", shape_str(updates.shape()), " must have the same shape");
  std::string reduction = n.s("reduction", "none");
  if (reduction == "add") return {scatter_add(x, axis, idx, updates)};
  if (reduction != "none") n.unsupported("reduction '", reduction, "' is not supported; Kiln runs 'none' and 'add'");
  Tensor hits = scatter_add(zeros(x.shape(), DType::Int64), axis, idx, ones(idx.shape(), DType::Int64));
  Tensor written = scatter_add(zeros(x.shape(), x.dtype()), axis, idx, updates);
  return {where(gt(hits, zeros({}, DType::Int64)), written, x)};
}

}  // namespace

void add_shape_converters(ConverterTable& t) {
  t["Reshape"] = reshape_op;
  t["Flatten"] = flatten_op;
  t["Squeeze"] = squeeze_op;
  t["Unsqueeze"] = unsqueeze_op;
  t["Transpose"] = transpose_op;
  t["Concat"] = concat_op;
  t["Split"] = split_op;
  t["Slice"] = slice_op;
  t["Gather"] = gather_op;
  t["GatherElements"] = gather_elements;
  t["ScatterElements"] = scatter_elements;
  t["OneHot"] = one_hot_op;
  t["Expand"] = expand_op;
  t["Tile"] = tile_op;
  t["Shape"] = shape_op;
  t["Size"] = [](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    return {scalar_tensor(static_cast<double>(input(n, in, 0).numel()), DType::Int64)};
  };
  t["Constant"] = constant_op;
  t["ConstantOfShape"] = constant_of_shape;
  t["Range"] = range_op;
  t["Pad"] = pad_op;
  t["Trilu"] = trilu;
  t["CumSum"] = cumsum_op;
  t["DepthToSpace"] = depth_to_space;
  t["SpaceToDepth"] = space_to_depth;
}

}  // namespace kiln::runtime

// View ops: view (reshape), permute, slice and expand, with the ONNX types
// they read (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Expand).
#include <algorithm>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

Shape resolve_view_shape(const Shape& in, Shape s) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      KILN_CHECK(infer_at < 0, "only one dimension of the new shape ", shape_str(s), " may be -1");
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(s[i] >= 0, "invalid size ", s[i], " in shape ", shape_str(s));
      known *= s[i];
    }
  }
  int64_t n = numel_of(in);
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && n % known == 0, "cannot reshape ", shape_str(in), " (", n, " elements) into ",
               shape_str(s));
    s[infer_at] = n / known;
  }
  KILN_CHECK(numel_of(s) == n, "cannot reshape ", shape_str(in), " (", n, " elements) into ", shape_str(s), " (",
             numel_of(s), " elements); the element counts must match");
  return s;
}

using detail::make_op;

// --- ONNX forms -------------------------------------------------------------------
// With a dynamic batch, a shape that keeps axis 0 writes 0 there: ONNX
// Reshape copies that size from the input.
void write_view(OnnxWriter& w) {
  std::vector<int64_t> shape(w.out_shape().begin(), w.out_shape().end());
  if (w.dynamic_batch() && !shape.empty()) {
    KILN_CHECK(!w.in_shape().empty() && w.in_shape()[0] == shape[0], "export with a dynamic batch: a reshape from ",
               shape_str(w.in_shape()), " to ", shape_str(w.out_shape()),
               " changes axis 0, so it cannot follow the batch size; export with fixed shapes "
               "(dynamic_batch off) or keep the batch axis first and whole");
    shape[0] = 0;
  }
  w.node("Reshape", {w.in(0), w.ints(shape, "shape")}, {w.out()});
}
void write_slice(OnnxWriter& w) {
  const Attrs& a = w.attrs();
  w.node("Slice",
         {w.in(0), w.ints({a.get_int("start")}, "starts"), w.ints({a.get_int("end")}, "ends"),
          w.ints({a.get_int("axis")}, "axes"), w.ints({a.get_int("step", 1)}, "steps")},
         {w.out()});
}
// ONNX Expand broadcasts both ways, so a batch axis kept whole may say 1.
void write_expand(OnnxWriter& w) {
  std::vector<int64_t> shape(w.out_shape().begin(), w.out_shape().end());
  const Shape& x = w.in_shape();
  if (w.dynamic_batch() && x.size() == shape.size() && !x.empty() && x[0] == shape[0]) shape[0] = 1;
  w.node("Expand", {w.in(0), w.ints(shape, "shape")}, {w.out()});
}
// --- ONNX readers -----------------------------------------------------------------
// Reshape, Flatten, Squeeze and Unsqueeze: the new shape, read as a view.
Shape onnx_reshape_shape(const OnnxReader& n, const Tensor& x, const std::vector<Tensor>& in) {
  std::vector<int64_t> shape = n.opset() >= 5 ? n.int_values(n.input(in, 1), "shape") : n.ints("shape");
  const bool allow_zero = n.i("allowzero", 0) != 0;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {  // 0 copies the input's size
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
  return shape;
}

Shape onnx_flatten_shape(const OnnxReader& n, const Tensor& x) {
  int64_t axis = n.i("axis", 1);
  if (axis < 0) axis += x.dim();
  if (axis < 0 || axis > x.dim()) n.fail("axis ", n.i("axis", 1), " is out of range for rank ", x.dim());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) (i < axis ? outer : inner) *= x.shape()[i];
  return {outer, inner};
}

Shape onnx_squeeze_shape(const OnnxReader& n, const Tensor& x, const std::vector<Tensor>& in) {
  const auto axes = n.axes_input(in, 1, 13);
  std::vector<bool> drop(static_cast<size_t>(x.dim()), false);
  if (axes.empty())
    for (int64_t i = 0; i < x.dim(); ++i) drop[i] = x.shape()[i] == 1;
  for (int64_t a : axes) {
    const int64_t ax = n.axis(a, x.dim());
    if (x.shape()[ax] != 1) n.fail("cannot squeeze axis ", a, " of size ", x.shape()[ax]);
    drop[ax] = true;
  }
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!drop[i]) s.push_back(x.shape()[i]);
  return s;
}

Shape onnx_unsqueeze_shape(const OnnxReader& n, const Tensor& x, const std::vector<Tensor>& in) {
  const auto axes = n.axes_input(in, 1, 13);
  const int64_t rank = x.dim() + static_cast<int64_t>(axes.size());
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    const int64_t ax = n.axis(a, rank);
    if (added[ax]) n.fail("axis ", a, " is given twice");
    added[ax] = true;
  }
  Shape s;
  int64_t next = 0;
  for (int64_t i = 0; i < rank; ++i) s.push_back(added[i] ? 1 : x.shape()[next++]);
  return s;
}

// They move data and compute nothing: half floats stay as they are.
OnnxImport view_reader() {
  return onnx_reader({"Reshape", "Flatten", "Squeeze", "Unsqueeze"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    const std::string& type = n.op_type();
    if (type == "Flatten") return {x.reshape(onnx_flatten_shape(n, x))};
    if (type == "Squeeze") return {x.reshape(onnx_squeeze_shape(n, x, in))};
    if (type == "Unsqueeze") return {x.reshape(onnx_unsqueeze_shape(n, x, in))};
    return {x.reshape(onnx_reshape_shape(n, x, in))};
  }, {1}, false);
}

// MindSpore's Reshape (x, shape), Flatten (to [N, -1]), ExpandDims (x, axis)
// and Squeeze (axis: a tuple, () for every axis of size 1).
OnnxImport mindspore_view_reader() {
  return onnx_reader({"Reshape", "Flatten", "ExpandDims", "Squeeze"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    const std::string& type = n.op_type();
    if (type == "Flatten") return {x.reshape({x.dim() == 0 ? 1 : x.shape()[0], -1})};
    if (type == "ExpandDims") {
      const int64_t axis = n.axis(static_cast<int64_t>(n.scalar_value(n.input(in, 1), "axis")), x.dim() + 1);
      Shape s = x.shape();
      s.insert(s.begin() + axis, 1);
      return {x.reshape(s)};
    }
    if (type == "Squeeze") {
      std::vector<int64_t> axes = n.ints("axis");
      for (int64_t& a : axes) a = n.axis(a, x.dim());
      Shape s;
      for (int64_t i = 0; i < x.dim(); ++i) {
        const bool listed = std::find(axes.begin(), axes.end(), i) != axes.end();
        if (listed && x.shape()[i] != 1) n.fail("axis ", i, " of ", x.meta_str(), " is not of size 1");
        if (!(axes.empty() ? x.shape()[i] == 1 : listed)) s.push_back(x.shape()[i]);
      }
      return {x.reshape(s)};
    }
    return {x.reshape(n.int_values(n.input(in, 1), "shape"))};
  }, {}, false);
}

OnnxImport transpose_reader() {
  return onnx_reader({"Transpose"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    std::vector<int64_t> perm = n.ints("perm");
    if (perm.empty())
      for (int64_t i = x.dim() - 1; i >= 0; --i) perm.push_back(i);
    return {x.permute(perm)};
  }, {}, false);
}

// Slice: starts, ends, axes and steps (attributes before opset 10). Bounds
// clamp as ONNX says; negative steps read the positions backwards through
// an index.
std::vector<Tensor> read_slice(const OnnxReader& n, const std::vector<Tensor>& in) {
  Tensor x = n.input(in, 0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.ints("starts");
    ends = n.ints("ends");
    axes = n.ints("axes");
  } else {
    starts = n.int_values(n.input(in, 1), "starts");
    ends = n.int_values(n.input(in, 2), "ends");
    if (in.size() > 3 && in[3].defined()) axes = n.int_values(in[3], "axes");
    if (in.size() > 4 && in[4].defined()) steps = n.int_values(in[4], "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    n.fail("starts, ends, axes and steps must have the same length");
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t ax = n.axis(axes[i], x.dim()), dim = x.shape()[ax], step = steps[i];
    if (step == 0) n.fail("a slice step cannot be 0");
    int64_t start = starts[i], end = ends[i];
    if (step > 0) {
      x = x.slice(ax, std::clamp<int64_t>(start, -dim - 1, dim), std::clamp<int64_t>(end, -dim - 1, dim), step);
      continue;
    }
    start = std::clamp<int64_t>(start < 0 ? start + dim : start, 0, dim - 1);
    end = std::clamp<int64_t>(end < 0 ? end + dim : end, -1, dim - 1);
    std::vector<int64_t> idx;
    for (int64_t p = start; p > end; p += step) idx.push_back(p);
    x = index_select(x, ax, from_vector(idx, Shape{static_cast<int64_t>(idx.size())}));
  }
  return {x};
}

// Expand broadcasts both ways: the result takes the larger of each size.
std::vector<Tensor> read_expand(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const Shape& a = x.shape();
  const Shape b = n.int_values(n.input(in, 1), "shape");
  const size_t r = std::max(a.size(), b.size());
  Shape target(r), lifted(r - a.size(), 1);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())], db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) n.fail("shapes ", shape_str(a), " and ", shape_str(b), " do not broadcast");
    target[i] = da == 1 ? db : da;
  }
  n.check_created_size(target);
  lifted.insert(lifted.end(), a.begin(), a.end());
  return {x.reshape(lifted).expand(target).contiguous()};
}

OpDefiner d_view(detail::reads_mindspore(detail::reads_onnx(make_op(
    "view", {"x"}, {"shape:ints"},
    [](const Metas& in, const Attrs& a) -> Metas {
      return {{true, resolve_view_shape(in[0].shape, a.get_ints("shape")), in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads { return {g[0].reshape(c.inputs[0].shape())}; }, {{"Reshape"}, write_view},
    kTagView), view_reader()), mindspore_view_reader()));

OpDefiner d_permute(detail::reads_mindspore(detail::reads_onnx(make_op(
    "permute", {"x"}, {"order:ints"},
    [](const Metas& in, const Attrs& a) -> Metas {
      auto order = a.get_ints("order");
      int64_t r = static_cast<int64_t>(in[0].shape.size());
      KILN_CHECK(static_cast<int64_t>(order.size()) == r, "order has ", order.size(), " axes but the tensor has rank ", r);
      Shape s(r);
      std::vector<bool> seen(r, false);
      for (int64_t i = 0; i < r; ++i) {
        int64_t ax = normalize_axis(order[i], r);
        KILN_CHECK(!seen[ax], "axis ", order[i], " appears twice in order");
        seen[ax] = true;
        s[i] = in[0].shape[ax];
      }
      return {{true, s, in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      auto order = c.attrs.get_ints("order");
      std::vector<int64_t> inverse(order.size());
      for (size_t i = 0; i < order.size(); ++i)
        inverse[normalize_axis(order[i], static_cast<int64_t>(order.size()))] = static_cast<int64_t>(i);
      return {g[0].permute(inverse)};
    },
    onnx_as("Transpose", [](const OnnxWriter& w) -> Attrs { return {{"perm", w.attrs().get_ints("order")}}; }), kTagView),
    transpose_reader()),
    // MindSpore's Transpose takes the permutation as a constant input.
    onnx_reader({"Transpose"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      return {n.input(in, 0).permute(n.int_values(n.input(in, 1), "perm"))};
    }, {}, false)));

}  // namespace

namespace detail {
void slice_bounds(int64_t size, int64_t& start, int64_t& end, int64_t step, int64_t& count) {
  KILN_CHECK(step > 0, "slice step must be positive, got ", step);
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, 0, size);
  count = end > start ? (end - start + step - 1) / step : 0;
}
}  // namespace detail

namespace {

Metas infer_slice(const Metas& in, const Attrs& a) {
  int64_t r = static_cast<int64_t>(in[0].shape.size());
  int64_t ax = normalize_axis(a.get_int("axis"), r);
  int64_t start = a.get_int("start"), end = a.get_int("end"), count = 0;
  detail::slice_bounds(in[0].shape[ax], start, end, a.get_int("step", 1), count);
  Shape s = in[0].shape;
  s[ax] = count;
  return {{true, s, in[0].dtype, in[0].device}};
}

// MindSpore's StridedSlice (x, begin, end, strides) with TensorFlow's masks:
// begin_mask and end_mask take an axis whole from that side, shrink_axis_mask
// keeps one index and drops the axis. Positive strides only.
std::vector<Tensor> read_mindspore_strided_slice(const OnnxReader& n, const std::vector<Tensor>& in) {
  Tensor x = n.input(in, 0);
  const auto begin = n.int_values(n.input(in, 1), "begin"), end = n.int_values(n.input(in, 2), "end"),
             strides = n.int_values(n.input(in, 3), "strides");
  if (begin.size() != end.size() || begin.size() != strides.size() || static_cast<int64_t>(begin.size()) > x.dim())
    n.fail("begin, end and strides must have one value per sliced axis of ", x.meta_str());
  if (n.i("ellipsis_mask", 0) || n.i("new_axis_mask", 0)) n.unsupported("ellipsis_mask and new_axis_mask");
  const int64_t begin_mask = n.i("begin_mask", 0), end_mask = n.i("end_mask", 0), shrink = n.i("shrink_axis_mask", 0);
  Shape kept;
  for (size_t i = 0; i < begin.size(); ++i) {
    const int64_t dim = x.shape()[i];
    if (strides[i] <= 0) n.unsupported("a stride of ", strides[i], " (Kiln reads positive strides)");
    if (shrink >> i & 1) {
      const int64_t at = begin[i] < 0 ? begin[i] + dim : begin[i];
      if (at < 0 || at >= dim) n.fail("index ", begin[i], " is out of range for axis ", i, " of size ", dim);
      x = x.slice(static_cast<int64_t>(i), at, at + 1);
      continue;
    }
    kept.push_back(static_cast<int64_t>(i));
    const int64_t start = begin_mask >> i & 1 ? 0 : std::clamp<int64_t>(begin[i], -dim, dim);
    const int64_t stop = end_mask >> i & 1 ? dim : std::clamp<int64_t>(end[i], -dim, dim);
    x = x.slice(static_cast<int64_t>(i), start, stop, strides[i]);
  }
  if (!shrink) return {x};
  Shape s;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i >= static_cast<int64_t>(begin.size()) || !(shrink >> i & 1)) s.push_back(x.shape()[i]);
  return {x.reshape(s)};
}

// MindSpore's Tile (x, multiples): each axis repeated whole, as numpy.tile.
std::vector<Tensor> read_mindspore_tile(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const auto multiples = n.int_values(n.input(in, 1), "multiples");
  if (static_cast<int64_t>(multiples.size()) < x.dim()) n.fail("multiples needs a value per axis of ", x.meta_str());
  Shape lifted, target, result;
  const size_t extra = multiples.size() - static_cast<size_t>(x.dim());
  for (size_t i = 0; i < multiples.size(); ++i) {
    const int64_t d = i < extra ? 1 : x.shape()[i - extra];
    lifted.insert(lifted.end(), {1, d});
    target.insert(target.end(), {multiples[i], d});
    result.push_back(multiples[i] * d);
  }
  n.check_created_size(result);
  return {x.reshape(lifted).expand(target).contiguous().reshape(result)};
}

OpDefiner d_slice(detail::reads_mindspore(detail::reads_onnx(make_op(
    "slice", {"x"}, {"axis:int", "start:int", "end:int", "step:int=1"}, infer_slice,
    [](const GradContext& c, const Grads& g) -> Grads {
      Attrs a = c.attrs;
      a.set("input_shape", c.inputs[0].shape());
      return {call("slice_backward", {g[0]}, a)[0]};
    },
    {{"Slice"}, write_slice}, kTagView),
    onnx_reader({"Slice"}, read_slice, {1, 2, 3, 4}, false)),
    onnx_reader({"StridedSlice"}, read_mindspore_strided_slice, {}, false)));

OpDefiner d_slice_bw(make_op(
    "slice_backward", {"grad"}, {"input_shape:ints", "axis:int", "start:int", "end:int", "step:int=1"},
    [](const Metas& in, const Attrs& a) -> Metas {
      return {{true, a.get_ints("input_shape"), in[0].dtype, in[0].device}};
    },
    nullptr, {}, kTagBackward));

OpDefiner d_expand(detail::reads_mindspore(detail::reads_onnx(make_op(
    "expand", {"x"}, {"shape:ints"},
    [](const Metas& in, const Attrs& a) -> Metas {
      Shape target = a.get_ints("shape");
      const Shape& s = in[0].shape;
      KILN_CHECK(target.size() >= s.size(), "cannot expand ", shape_str(s), " to fewer dimensions ", shape_str(target));
      for (size_t i = 0; i < s.size(); ++i) {
        int64_t& t = target[target.size() - s.size() + i];
        if (t == -1) t = s[i];
        KILN_CHECK(s[i] == t || s[i] == 1, "cannot expand ", shape_str(s), " to ", shape_str(a.get_ints("shape")),
                   ": axis of size ", s[i], " must be 1 or equal the target size");
      }
      return {{true, target, in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads { return {sum_to(g[0], c.inputs[0].shape())}; }, {{"Expand"}, write_expand},
    kTagView), onnx_reader({"Expand"}, read_expand, {1}, false)),
    onnx_reader({"Tile"}, read_mindspore_tile, {}, false)));

}  // namespace
}  // namespace kiln

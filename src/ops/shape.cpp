// Shape ops: views (view, permute, slice, expand, split), joins, padding,
// triangular masks and cumulative sums.
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
void write_split(OnnxWriter& w) {
  w.node("Split", {w.in(0), w.ints(w.attrs().get_ints("sizes"), "split")}, w.outputs(),
         {{"axis", w.attrs().get_int("axis", 0)}});
}
// Kiln's pads are (before, after) pairs from the last axis backwards; ONNX's
// are every axis's begin, then every axis's end.
void write_pad(OnnxWriter& w) {
  auto pairs = w.attrs().get_ints("pads");
  const size_t rank = w.in_shape().size();
  std::vector<int64_t> pads(2 * rank, 0);
  for (size_t i = 0; i < pairs.size() / 2; ++i) {
    size_t ax = rank - 1 - i;
    pads[ax] = pairs[2 * i];
    pads[rank + ax] = pairs[2 * i + 1];
  }
  std::string mode = w.attrs().get_string("mode", "constant");
  std::vector<std::string> ins = {w.in(0), w.ints(pads, "pads")};
  if (mode == "constant") ins.push_back(w.scalar(w.attrs().get_float("value", 0), w.dtype(), "pad_value"));
  w.node("Pad", ins, {w.out()}, {{"mode", mode}});
}
OnnxExport onnx_trilu(bool upper) {
  return {{"Trilu"}, [upper](OnnxWriter& w) {
            KILN_CHECK(w.opset() >= 14, "export: ", upper ? "triu" : "tril", " is ONNX Trilu, which needs opset 14 "
                       "or later; export with opset 14 to 17 (17 is the default)");
            std::string k = w.scalar(static_cast<double>(w.attrs().get_int("diagonal", 0)), DType::Int64, "k");
            w.node("Trilu", {w.in(0), k}, {w.out()}, {{"upper", int64_t{upper ? 1 : 0}}});
          }};
}
void write_cumsum(OnnxWriter& w) {
  std::string axis = w.scalar(static_cast<double>(w.attrs().get_int("axis")), DType::Int64, "axis");
  w.node("CumSum", {w.in(0), axis}, {w.out()}, {{"reverse", w.attrs().get_bool("reverse", false)}});
}


OpDefiner d_view(make_op(
    "view", {"x"}, {"shape:ints"},
    [](const Metas& in, const Attrs& a) -> Metas {
      return {{true, resolve_view_shape(in[0].shape, a.get_ints("shape")), in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads { return {g[0].reshape(c.inputs[0].shape())}; }, {{"Reshape"}, write_view},
    kTagView));

OpDefiner d_permute(make_op(
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
    onnx_as("Transpose", [](const OnnxWriter& w) -> Attrs { return {{"perm", w.attrs().get_ints("order")}}; }), kTagView));

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

OpDefiner d_slice(make_op(
    "slice", {"x"}, {"axis:int", "start:int", "end:int", "step:int=1"}, infer_slice,
    [](const GradContext& c, const Grads& g) -> Grads {
      Attrs a = c.attrs;
      a.set("input_shape", c.inputs[0].shape());
      return {call("slice_backward", {g[0]}, a)[0]};
    },
    {{"Slice"}, write_slice}, kTagView));

OpDefiner d_slice_bw(make_op(
    "slice_backward", {"grad"}, {"input_shape:ints", "axis:int", "start:int", "end:int", "step:int=1"},
    [](const Metas& in, const Attrs& a) -> Metas {
      return {{true, a.get_ints("input_shape"), in[0].dtype, in[0].device}};
    },
    nullptr, {}, kTagBackward));

OpDefiner d_expand(make_op(
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
    kTagView));

Metas infer_concat(const Metas& in, const Attrs& a) {
  KILN_CHECK(!in.empty(), "needs at least one tensor");
  const Shape& first = in[0].shape;
  int64_t r = static_cast<int64_t>(first.size());
  KILN_CHECK(r > 0, "cannot concatenate 0-dimensional tensors; unsqueeze them or use stack");
  int64_t ax = normalize_axis(a.get_int("axis", 0), r);
  Shape s = first;
  s[ax] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    KILN_CHECK(in[i].dtype == in[0].dtype, "tensor ", i, " is ", dtype_name(in[i].dtype), " but tensor 0 is ",
               dtype_name(in[0].dtype), "; cast them to one dtype");
    KILN_CHECK(static_cast<int64_t>(in[i].shape.size()) == r, "tensor ", i, " has shape ", shape_str(in[i].shape),
               " but tensor 0 has rank ", r);
    for (int64_t d = 0; d < r; ++d)
      KILN_CHECK(d == ax || in[i].shape[d] == first[d], "tensor ", i, " has shape ", shape_str(in[i].shape),
                 ", which differs from tensor 0's ", shape_str(first), " outside the concatenation axis ", ax);
    s[ax] += in[i].shape[ax];
  }
  return {{true, s, in[0].dtype, in[0].device}};
}

OpDefiner d_concat(make_op(
    "concat", {"tensors*"}, {"axis:int=0"}, infer_concat,
    [](const GradContext& c, const Grads& g) -> Grads {
      int64_t ax = normalize_axis(c.attrs.get_int("axis", 0), c.inputs[0].dim());
      Grads out;
      int64_t at = 0;
      for (auto& t : c.inputs) {
        int64_t n = t.shape()[ax];
        out.push_back(g[0].slice(ax, at, at + n));
        at += n;
      }
      return out;
    },
    onnx_as("Concat", [](const OnnxWriter& w) -> Attrs { return {{"axis", w.attrs().get_int("axis", 0)}}; }), 0));

OpDefiner d_split([] {
  OpDef d = make_op(
      "split", {"x"}, {"sizes:ints", "axis:int=0"},
      [](const Metas& in, const Attrs& a) -> Metas {
        int64_t ax = normalize_axis(a.get_int("axis", 0), static_cast<int64_t>(in[0].shape.size()));
        auto sizes = a.get_ints("sizes");
        int64_t total = 0;
        Metas out;
        for (int64_t s : sizes) {
          KILN_CHECK(s >= 0, "split sizes must be >= 0");
          total += s;
          Shape sh = in[0].shape;
          sh[ax] = s;
          out.push_back({true, sh, in[0].dtype, in[0].device});
        }
        KILN_CHECK(total == in[0].shape[ax], "split sizes add up to ", total, " but axis ", ax, " has size ",
                   in[0].shape[ax]);
        return out;
      },
      [](const GradContext& c, const Grads& g) -> Grads {
        std::vector<Tensor> parts;
        for (size_t i = 0; i < g.size(); ++i)
          parts.push_back(g[i].defined() ? g[i] : zeros(c.outputs[i].shape(), c.outputs[i].dtype()));
        return {concat(parts, c.attrs.get_int("axis", 0))};
      },
      OnnxExport{{"Split"}, write_split}, kTagView);
  d.outputs = {"parts*"};
  return d;
}());

OpDefiner d_pad(make_op(
    "pad", {"x"}, {"pads:ints", "mode:string=constant|reflect", "value:float=0"},
    [](const Metas& in, const Attrs& a) -> Metas {
      auto pads = a.get_ints("pads");
      std::string mode = a.get_string("mode", "constant");
      KILN_CHECK(mode == "constant" || mode == "reflect", "mode '", mode, "' is not one of 'constant', 'reflect'");
      int64_t r = static_cast<int64_t>(in[0].shape.size());
      KILN_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) / 2 <= r, "pads must hold (before, after) ",
                 "pairs for at most ", r, " axes, got ", pads.size(), " values");
      Shape s = in[0].shape;
      for (size_t i = 0; i < pads.size() / 2; ++i) {
        int64_t ax = r - 1 - static_cast<int64_t>(i);
        int64_t before = pads[2 * i], after = pads[2 * i + 1];
        if (mode == "reflect")
          KILN_CHECK(before >= 0 && after >= 0 && before < s[ax] && after < s[ax], "reflect padding (", before, ", ",
                     after, ") must be smaller than the size ", s[ax], " of axis ", ax);
        s[ax] += before + after;
        KILN_CHECK(s[ax] >= 0, "padding makes axis ", ax, " negative");
      }
      return {{true, s, in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      Attrs a{{"pads", c.attrs.get_ints("pads")}, {"mode", c.attrs.get_string("mode", "constant")},
              {"input_shape", c.inputs[0].shape()}};
      return {call("pad_backward", {g[0]}, a)[0]};
    },
    {{"Pad"}, write_pad}, 0));

OpDefiner d_pad_bw(make_op(
    "pad_backward", {"grad"}, {"input_shape:ints", "pads:ints", "mode:string"},
    [](const Metas& in, const Attrs& a) -> Metas {
      return {{true, a.get_ints("input_shape"), in[0].dtype, in[0].device}};
    },
    nullptr, {}, kTagBackward));

Metas infer_tri(const Metas& in, const Attrs&) {
  KILN_CHECK(in[0].shape.size() >= 2, "needs a tensor of rank >= 2, got ", shape_str(in[0].shape));
  return {in[0]};
}
OpDefiner d_tril(make_op(
    "tril", {"x"}, {"diagonal:int=0"}, infer_tri,
    [](const GradContext& c, const Grads& g) -> Grads { return {tril(g[0], c.attrs.get_int("diagonal", 0))}; },
    onnx_trilu(false), 0));
OpDefiner d_triu(make_op(
    "triu", {"x"}, {"diagonal:int=0"}, infer_tri,
    [](const GradContext& c, const Grads& g) -> Grads { return {triu(g[0], c.attrs.get_int("diagonal", 0))}; },
    onnx_trilu(true), 0));

OpDefiner d_cumsum(make_op(
    "cumsum", {"x"}, {"axis:int", "reverse:bool=false"},
    [](const Metas& in, const Attrs& a) -> Metas {
      normalize_axis(a.get_int("axis"), static_cast<int64_t>(in[0].shape.size()));
      return {in[0]};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      return {call("cumsum", {g[0]}, {{"axis", c.attrs.get_int("axis")}, {"reverse", !c.attrs.get_bool("reverse", false)}})[0]};
    },
    {{"CumSum"}, write_cumsum}, 0));

}  // namespace

// Functional API.
Tensor concat(const std::vector<Tensor>& tensors, int64_t axis) {
  if (tensors.size() == 1) return tensors[0];
  return call1(KILN_OP("concat"), tensors, {{"axis", axis}});
}
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  KILN_CHECK(!tensors.empty(), "stack: needs at least one tensor");
  std::vector<Tensor> parts;
  int64_t ax = normalize_axis(axis, tensors[0].dim() + 1);
  for (auto& t : tensors) parts.push_back(t.unsqueeze(ax));
  return concat(parts, ax);
}
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  return call(KILN_OP("split"), {x}, {{"sizes", sizes}, {"axis", axis}});
}
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis) {
  KILN_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  int64_t n = x.size(axis);
  int64_t each = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += each) sizes.push_back(std::min(each, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, axis);
}
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  return call1(KILN_OP("pad"), {x}, {{"pads", pads}, {"mode", mode}, {"value", value}});
}
Tensor tril(const Tensor& x, int64_t diagonal) { return call1(KILN_OP("tril"), {x}, {{"diagonal", diagonal}}); }
Tensor triu(const Tensor& x, int64_t diagonal) { return call1(KILN_OP("triu"), {x}, {{"diagonal", diagonal}}); }
Tensor cumsum(const Tensor& x, int64_t axis) { return call1(KILN_OP("cumsum"), {x}, {{"axis", axis}}); }

}  // namespace kiln

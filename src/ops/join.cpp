// Joining and filling ops: concat, split, pad, triangular masks and
// cumulative sums, with the ONNX types they read (Concat, Split, Pad, Trilu,
// CumSum).
#include <algorithm>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;
using detail::make_op;

// --- ONNX forms -------------------------------------------------------------------
void write_split(OnnxWriter& w) {
  w.node("Split", {w.in(0), w.ints(w.attrs().get_ints("sizes"), "split")}, w.outputs(),
         {{"axis", w.attrs().get_int("axis", 0)}});
}
// ONNX Pad's wrap mode needs opset 19: each padded axis is the tail of the
// axis, the axis, and its head, joined (pads at most the axis's size).
void write_circular_pad(OnnxWriter& w, const std::vector<int64_t>& pads) {
  const Shape& x = w.in_shape();
  const int64_t rank = static_cast<int64_t>(x.size());
  std::string current = w.in(0);
  for (int64_t ax = 0; ax < rank; ++ax) {
    const int64_t before = pads[ax], after = pads[rank + ax], size = x[ax];
    if (before == 0 && after == 0) continue;
    KILN_CHECK(before <= size && after <= size, "export: circular padding (", before, ", ", after, ") of axis ", ax,
               " wider than its size ", size, " has no ONNX form before opset 19's Pad mode 'wrap'");
    auto slice = [&](int64_t start, int64_t end) {
      std::string part = w.unique("wrap");
      w.node("Slice", {current, w.ints({start}, "starts"), w.ints({end}, "ends"), w.ints({ax}, "axes")}, {part});
      return part;
    };
    std::vector<std::string> parts;
    if (before) parts.push_back(slice(size - before, size));
    parts.push_back(current);
    if (after) parts.push_back(slice(0, after));
    const bool last = std::none_of(pads.begin() + ax + 1, pads.begin() + rank, [](int64_t p) { return p != 0; }) &&
                      std::none_of(pads.begin() + rank + ax + 1, pads.end(), [](int64_t p) { return p != 0; });
    std::string joined = last ? w.out() : w.unique("wrapped");
    w.node("Concat", parts, {joined}, {{"axis", ax}});
    current = joined;
  }
  if (current == w.in(0)) w.node("Identity", {current}, {w.out()});
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
  const std::string mode = w.attrs().get_string("mode", "constant");
  if (mode == "circular") return write_circular_pad(w, pads);
  std::vector<std::string> ins = {w.in(0), w.ints(pads, "pads")};
  if (mode == "constant") ins.push_back(w.scalar(w.attrs().get_float("value", 0), w.dtype(), "pad_value"));
  w.node("Pad", ins, {w.out()}, {{"mode", mode == "replicate" ? std::string("edge") : mode}});
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


// --- ONNX readers -----------------------------------------------------------------
std::vector<Tensor> read_concat(const OnnxReader& n, const std::vector<Tensor>& in) {
  if (in.empty()) n.fail("Concat needs at least one input");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < in.size(); ++i) parts.push_back(n.input(in, i));
  return {concat(parts, n.axis(n.required_i("axis"), parts[0].dim()))};
}

// Split sizes from the input (opset 13 on) or the attribute; without them,
// as many near-equal parts as the node has outputs.
std::vector<Tensor> read_split(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(n.i("axis", 0), x.dim());
  std::vector<int64_t> sizes;
  if (n.opset() < 13) sizes = n.ints("split");
  else if (in.size() > 1 && in[1].defined()) sizes = n.int_values(in[1], "split");
  if (sizes.empty()) {
    const int64_t parts = static_cast<int64_t>(n.num_outputs()), dim = x.shape()[axis];
    const int64_t each = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  }
  return split(x, sizes, axis);
}

// Pad: ONNX's pads are every axis's begin, then every axis's end (an
// attribute before opset 11).
std::vector<Tensor> read_pad(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const std::string onnx_mode = n.s("mode", "constant");
  const std::string mode = onnx_mode == "edge" ? "replicate" : onnx_mode == "wrap" ? "circular" : onnx_mode;
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    n.fail("pad mode '", onnx_mode, "' is not one of constant, reflect, edge, wrap");
  std::vector<int64_t> given;
  double value = 0;
  const int64_t r = x.dim();
  std::vector<int64_t> axes;
  if (n.opset() < 11) {
    given = n.ints("pads");
    value = n.f("value", 0);
  } else {
    given = n.int_values(n.input(in, 1), "pads");
    if (in.size() > 2 && in[2].defined()) value = n.scalar_value(in[2], "constant_value");
    if (in.size() > 3 && in[3].defined()) axes = n.int_values(in[3], "axes");
  }
  if (axes.empty())
    for (int64_t ax = 0; ax < r; ++ax) axes.push_back(ax);
  const int64_t k = static_cast<int64_t>(axes.size());
  if (static_cast<int64_t>(given.size()) != 2 * k) n.fail("pads has ", given.size(), " values for ", k, " axes");
  std::vector<int64_t> begin(r, 0), end(r, 0);  // per axis of x
  for (int64_t i = 0; i < k; ++i) {
    const int64_t ax = n.axis(axes[i], r);
    begin[ax] = given[i];
    end[ax] = given[k + i];
  }
  std::vector<int64_t> pairs;
  for (int64_t ax = r - 1; ax >= 0; --ax) {
    if (begin[ax] < 0 || end[ax] < 0) n.unsupported("negative pads are not supported");
    pairs.push_back(begin[ax]);
    pairs.push_back(end[ax]);
  }
  return {pad(x, pairs, mode, value)};
}

std::vector<Tensor> read_trilu(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t k = in.size() > 1 && in[1].defined() ? static_cast<int64_t>(n.scalar_value(in[1], "k")) : 0;
  return {n.i("upper", 1) ? triu(x, k) : tril(x, k)};
}

// CumSum: the axis is an input; exclusive sums leave out the element itself.
std::vector<Tensor> read_cumsum(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(static_cast<int64_t>(n.scalar_value(n.input(in, 1), "axis")), x.dim());
  Tensor y = call1(KILN_OP("cumsum"), {x}, Attrs{{"axis", axis}, {"reverse", n.i("reverse", 0) != 0}});
  if (n.i("exclusive", 0)) y = y - x;
  return {y};
}

// CumProd: as CumSum; exclusive products are the inclusive ones shifted by
// one place along the scan, with 1 first (no division, so zeros are fine).
std::vector<Tensor> read_cumprod(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(static_cast<int64_t>(n.scalar_value(n.input(in, 1), "axis")), x.dim());
  const bool reverse = n.i("reverse", 0) != 0;
  Tensor y = call1(KILN_OP("cumprod"), {x}, Attrs{{"axis", axis}, {"reverse", reverse}});
  const int64_t size = x.shape()[axis];
  if (!n.i("exclusive", 0) || size == 0) return {y};
  Shape one = x.shape();
  one[axis] = 1;
  const Tensor first = ones(one, x.dtype(), x.device());
  if (reverse) return {concat({y.slice(axis, 1, size), first}, axis)};
  return {concat({first, y.slice(axis, 0, size - 1)}, axis)};
}

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

OpDefiner d_concat(detail::reads_mindspore(detail::reads_onnx(make_op(
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
    onnx_as("Concat", [](const OnnxWriter& w) -> Attrs { return {{"axis", w.attrs().get_int("axis", 0)}}; }), 0),
    onnx_reader({"Concat"}, read_concat, {}, false)),
    // MindSpore's Concat and Stack take a tuple, which arrives as its items.
    onnx_reader({"Concat", "Stack"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      if (in.empty()) n.fail("takes at least one tensor");
      if (n.op_type() == "Stack") return {stack(in, n.axis(n.i("axis", 0), in[0].dim() + 1))};
      return {concat(in, n.axis(n.i("axis", 0), in[0].dim()))};
    }, {}, false)));

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
          parts.push_back(g[i].defined() ? g[i]
                                         : zeros(c.outputs[i].shape(), c.outputs[i].dtype(), c.outputs[i].device()));
        return {concat(parts, c.attrs.get_int("axis", 0))};
      },
      OnnxExport{{"Split"}, write_split}, kTagView);
  d.outputs = {"parts*"};
  d.onnx_import = onnx_reader({"Split"}, read_split, {1}, false);
  // MindSpore's Split (axis, output_num): equal parts.
  d.mindspore_import = onnx_reader({"Split"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = n.input(in, 0);
    const int64_t axis = n.axis(n.i("axis", 0), x.dim()), parts = n.i("output_num", 1);
    if (parts < 1 || x.shape()[axis] % parts != 0) n.fail("axis ", axis, " of ", x.meta_str(), " does not split into ", parts, " equal parts");
    return split(x, std::vector<int64_t>(static_cast<size_t>(parts), x.shape()[axis] / parts), axis);
  }, {}, false);
  return d;
}());

OpDefiner d_pad(detail::reads_mindspore(detail::reads_onnx(make_op(
    "pad", {"x"}, {"pads:ints", "mode:string=constant|reflect|replicate|circular", "value:float=0"},
    [](const Metas& in, const Attrs& a) -> Metas {
      auto pads = a.get_ints("pads");
      std::string mode = a.get_string("mode", "constant");
      KILN_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular", "mode '", mode,
                 "' is not one of 'constant', 'reflect', 'replicate', 'circular'");
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
        if (mode == "replicate" || mode == "circular")
          KILN_CHECK(before >= 0 && after >= 0 && (s[ax] > 0 || before + after == 0), mode, " padding (", before, ", ",
                     after, ") needs a non-empty axis ", ax, " and no negative pads");
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
    {{"Pad", "Slice", "Concat", "Identity"}, write_pad}, 0),
    onnx_reader({"Pad"}, read_pad, {1, 2, 3}, false)),
    // MindSpore's Pad: paddings ((before, after) per axis, from the first), zeros.
    onnx_reader({"Pad"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      const Tensor& x = n.input(in, 0);
      const std::vector<int64_t> p = n.ints("paddings");
      if (p.size() != static_cast<size_t>(2 * x.dim())) n.fail("paddings should hold a (before, after) pair per axis of ", x.meta_str());
      std::vector<int64_t> pads;
      for (int64_t ax = x.dim() - 1; ax >= 0; --ax) pads.insert(pads.end(), {p[2 * ax], p[2 * ax + 1]});
      return {pad(x, pads)};
    }, {}, false)));

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
OpDefiner d_triu(detail::reads_onnx(make_op(
    "triu", {"x"}, {"diagonal:int=0"}, infer_tri,
    [](const GradContext& c, const Grads& g) -> Grads { return {triu(g[0], c.attrs.get_int("diagonal", 0))}; },
    onnx_trilu(true), 0),
    onnx_reader({"Trilu"}, read_trilu, {1}, false)));

OpDefiner d_cumsum(detail::autocast_as(detail::reads_onnx(make_op(
    "cumsum", {"x"}, {"axis:int", "reverse:bool=false"},
    [](const Metas& in, const Attrs& a) -> Metas {
      normalize_axis(a.get_int("axis"), static_cast<int64_t>(in[0].shape.size()));
      return {in[0]};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      return {call("cumsum", {g[0]}, {{"axis", c.attrs.get_int("axis")}, {"reverse", !c.attrs.get_bool("reverse", false)}})[0]};
    },
    {{"CumSum"}, write_cumsum}, 0),
    onnx_reader({"CumSum"}, read_cumsum, {1}, true)), Autocast::Float32));

// ONNX has CumProd from opset 26 only: export refuses it by name.
OpDefiner d_cumprod(detail::autocast_as(detail::reads_onnx(make_op(
    "cumprod", {"x"}, {"axis:int", "reverse:bool=false"},
    [](const Metas& in, const Attrs& a) -> Metas {
      normalize_axis(a.get_int("axis"), static_cast<int64_t>(in[0].shape.size()));
      return {in[0]};
    },
    [](const GradContext& c, const Grads& g) -> Grads { return {call("cumprod_backward", {g[0], c.inputs[0]}, c.attrs)[0]}; },
    {}, 0),
    onnx_reader({"CumProd"}, read_cumprod, {1}, true)), Autocast::Float32));

OpDefiner d_cumprod_bw(make_op(
    "cumprod_backward", {"grad", "x"}, {"axis:int", "reverse:bool=false"},
    [](const Metas& in, const Attrs&) -> Metas { return {in[1]}; }, nullptr, {}, kTagBackward));

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
Tensor cumprod(const Tensor& x, int64_t axis) { return call1(KILN_OP("cumprod"), {x}, {{"axis", axis}}); }

}  // namespace kiln

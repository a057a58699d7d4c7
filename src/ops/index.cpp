// Indexing: embedding, gather, index_select, scatter_add, one_hot.
#include <map>

#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

void check_index(const TensorMeta& m, const char* what) {
  KILN_CHECK(m.dtype == DType::Int64 || m.dtype == DType::Int32, what, " must be int64 or int32, got ",
             dtype_name(m.dtype), "; convert it with .to(kiln::DType::Int64)");
}

OpDef make(const char* name, std::vector<std::string> inputs, std::vector<std::string> attrs, InferFn infer, GradFn grad,
           OnnxExport onnx, std::vector<int> diff) {
  OpDef d = detail::make_op(name, std::move(inputs), std::move(attrs), std::move(infer), std::move(grad), std::move(onnx));
  d.differentiable_inputs = std::move(diff);
  return d;
}

// ONNX ScatterElements adds from opset 16 on, and its updates have the
// index's shape: src is cut to it first where it is larger.
void write_scatter_add(OnnxWriter& w) {
  KILN_CHECK(w.opset() >= 16, "export: scatter_add is ONNX ScatterElements with reduction 'add', which needs opset 16 "
             "or later; export with opset 16 or 17 (the default)");
  w.node("ScatterElements", {w.in(0), w.in(1), detail::updates_like_index(w)}, {w.out()},
         {{"axis", w.attrs().get_int("axis")}, {"reduction", std::string("add")}});
}
// ONNX OneHot's output takes the dtype of its (off, on) values: int64 here.
void write_one_hot(OnnxWriter& w) {
  Tensor values = Tensor::empty({2}, DType::Int64);
  values.data<int64_t>()[0] = 0;
  values.data<int64_t>()[1] = 1;
  std::string depth = w.ints({w.attrs().get_int("num_classes")}, "depth");
  w.node("OneHot", {w.in(0), depth, w.initializer(values, "one_hot_values")}, {w.out()}, {{"axis", int64_t{-1}}});
}

// --- ONNX readers -----------------------------------------------------------------
// Negative indices count from the end of `dim`.
Tensor wrap_indices(const Tensor& idx, int64_t dim) {
  const Tensor i = idx.dtype() == DType::Int64 ? idx : cast(idx, DType::Int64);
  return where(lt(i, zeros({}, DType::Int64)), i + scalar_tensor(static_cast<double>(dim), DType::Int64), i);
}

// Gather: x's axis replaced by the indices' shape; rows of a float matrix
// are an embedding lookup.
std::vector<Tensor> read_gather(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor &x = n.input(in, 0), &idx = n.input(in, 1);
  const int64_t axis = n.axis(n.i("axis", 0), x.dim());
  Shape out(x.shape().begin(), x.shape().begin() + axis);
  out.insert(out.end(), idx.shape().begin(), idx.shape().end());
  out.insert(out.end(), x.shape().begin() + axis + 1, x.shape().end());
  // Rows of a table by indices of any shape: one embedding, not flattened
  // ([B, L] -> [B * L] and back is not a function of B and L that a graph
  // generalized over both can follow).
  if (axis == 0 && x.dim() == 2 && is_floating(x.dtype())) return {embedding(x, wrap_indices(idx, x.shape()[0]))};
  const Tensor flat = wrap_indices(idx, x.shape()[axis]).reshape({idx.numel()});
  return {index_select(x, axis, flat).reshape(out)};
}

std::vector<Tensor> read_gather_elements(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x = n.input(in, 0);
  const int64_t axis = n.axis(n.i("axis", 0), x.dim());
  return {gather(x, axis, wrap_indices(n.input(in, 1), x.shape()[axis]))};
}

// ScatterElements (and Scatter, its name before opset 11) with reduction
// none (the updates replace), add, mul, max or min. With repeated indices ONNX leaves "none" undefined; here they add up.
std::vector<Tensor> read_scatter_elements(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor &x = n.input(in, 0), &updates = n.input(in, 2);
  const int64_t axis = n.axis(n.i("axis", 0), x.dim());
  const Tensor idx = wrap_indices(n.input(in, 1), x.shape()[axis]);
  if (idx.shape() != updates.shape())
    n.fail("indices ", shape_str(idx.shape()), " and updates ", shape_str(updates.shape()), " must have the same shape");
  const std::string reduction = n.s("reduction", "none");
  if (reduction == "add") return {scatter_add(x, axis, idx, updates)};
  if (reduction == "mul" || reduction == "max" || reduction == "min")
    return {scatter_reduce(x, axis, idx, updates, reduction == "mul" ? "prod" : reduction == "max" ? "amax" : "amin")};
  if (reduction != "none") n.fail("reduction '", reduction, "' is not one of none, add, mul, max, min");
  const Tensor hits =
      scatter_add(zeros(x.shape(), DType::Int64, x.device()), axis, idx, ones(idx.shape(), DType::Int64, x.device()));
  const Tensor written = scatter_add(zeros(x.shape(), x.dtype(), x.device()), axis, idx, updates);
  return {where(gt(hits, zeros({}, DType::Int64)), written, x)};
}

// OneHot(indices, depth, values = [off, on]) along `axis` (default -1, a new
// last axis). Negative indices count from depth; indices out of range give a
// row of off values. The output takes the values' dtype.
std::vector<Tensor> read_one_hot(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& raw = n.input(in, 0);
  const int64_t depth = static_cast<int64_t>(n.scalar_value(n.input(in, 1), "depth"));
  if (depth <= 0) n.fail("depth must be positive, got ", depth);
  const Tensor& values = n.input(in, 2);
  if (values.numel() != 2) n.fail("values must hold [off_value, on_value], got shape ", shape_str(values.shape()));
  const Tensor i = wrap_indices(is_floating(raw.dtype()) ? cast(raw, DType::Int64) : raw, depth);
  const Tensor zero = zeros({}, DType::Int64);
  const Tensor valid = where(ge(i, zero), lt(i, scalar_tensor(static_cast<double>(depth), DType::Int64)), zeros({}, DType::Bool));
  const Tensor hot = one_hot(where(valid, i, zero), depth);
  Shape with_class = i.shape();
  with_class.push_back(1);
  const Tensor on = gt(hot * cast(valid, DType::Int64).reshape(with_class), zero);
  const Tensor flat = values.reshape({2});
  const Tensor y = where(on, flat.slice(0, 1, 2).reshape({}), flat.slice(0, 0, 1).reshape({}));
  const int64_t rank = y.dim(), axis = n.axis(n.i("axis", -1), rank);
  if (axis == rank - 1) return {y};
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank - 1; ++d) {
    if (d == axis) order.push_back(rank - 1);
    order.push_back(d);
  }
  return {y.permute(order).contiguous()};
}

// padding_idx (-1: none): the row that padding positions read, which gets no
// gradient (PyTorch's and MindSpore's meaning).
OpDefiner d_embedding(make(
    "embedding", {"weight", "indices"}, {"padding_idx:int=-1"},
    [](const Metas& in, const Attrs&) -> Metas {
      detail::check_rank(in[0], 2, "weight", "num_embeddings, dim");
      check_index(in[1], "indices");
      Shape s = in[1].shape;
      s.push_back(in[0].shape[1]);
      return {{true, s, in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      return {call("embedding_backward", {g[0], c.inputs[1]},
                   {{"num_embeddings", c.inputs[0].shape()[0]}, {"padding_idx", c.attrs.get_int("padding_idx", -1)}})[0],
              Tensor()};
    },
    onnx_as("Gather", [](const OnnxWriter&) -> Attrs { return {{"axis", int64_t{0}}}; }), {0}));

OpDefiner d_embedding_bw([] {
  OpDef d = make(
      "embedding_backward", {"grad", "indices"}, {"num_embeddings:int", "padding_idx:int=-1"},
      [](const Metas& in, const Attrs& a) -> Metas {
        return {{true, {a.get_int("num_embeddings"), in[0].shape.back()}, in[0].dtype, in[0].device}};
      },
      nullptr, {}, {});
  d.tags |= kTagBackward;
  return d;
}());

Metas infer_gather(const Metas& in, const Attrs& a) {
  check_index(in[1], "index");
  int64_t r = static_cast<int64_t>(in[0].shape.size());
  int64_t ax = normalize_axis(a.get_int("axis"), r);
  KILN_CHECK(static_cast<int64_t>(in[1].shape.size()) == r, "index must have the rank of x (", r, "), got ",
             shape_str(in[1].shape));
  for (int64_t d = 0; d < r; ++d)
    KILN_CHECK(d == ax || in[1].shape[d] <= in[0].shape[d], "index ", shape_str(in[1].shape),
               " is larger than x ", shape_str(in[0].shape), " on axis ", d);
  return {{true, in[1].shape, in[0].dtype, in[0].device}};
}

OpDefiner d_gather(detail::reads_onnx(make(
    "gather", {"x", "index"}, {"axis:int"}, infer_gather,
    [](const GradContext& c, const Grads& g) -> Grads {
      int64_t ax = c.attrs.get_int("axis");
      return {scatter_add(zeros_like(c.inputs[0]), ax, c.inputs[1], g[0]), Tensor()};
    },
    onnx_as("GatherElements", [](const OnnxWriter& w) -> Attrs { return {{"axis", w.attrs().get_int("axis")}}; }), {0}),
    onnx_reader({"GatherElements"}, read_gather_elements, {}, false)));

OpDefiner d_index_select(detail::reads_mindspore(detail::reads_onnx(make(
    "index_select", {"x", "index"}, {"axis:int"},
    [](const Metas& in, const Attrs& a) -> Metas {
      check_index(in[1], "index");
      KILN_CHECK(in[1].shape.size() == 1, "index must be 1-D, got ", shape_str(in[1].shape));
      int64_t ax = normalize_axis(a.get_int("axis"), static_cast<int64_t>(in[0].shape.size()));
      Shape s = in[0].shape;
      s[ax] = in[1].shape[0];
      return {{true, s, in[0].dtype, in[0].device}};
    },
    [](const GradContext& c, const Grads& g) -> Grads {
      const Tensor& x = c.inputs[0];
      int64_t ax = normalize_axis(c.attrs.get_int("axis"), x.dim());
      Shape is(x.dim(), 1);
      is[ax] = c.inputs[1].numel();
      Tensor idx = c.inputs[1].reshape(is).expand(g[0].shape()).contiguous();
      return {scatter_add(zeros_like(x), ax, idx, g[0]), Tensor()};
    },
    onnx_as("Gather", [](const OnnxWriter& w) -> Attrs { return {{"axis", w.attrs().get_int("axis")}}; }), {0}),
    onnx_reader({"Gather"}, read_gather, {}, false)),
    // MindSpore's Gather (params, indices, axis): the rows of an embedding table.
    onnx_reader({"Gather"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      const Tensor &x = n.input(in, 0), &idx = n.input(in, 1);
      const int64_t axis = n.axis(static_cast<int64_t>(n.scalar_value(n.input(in, 2), "axis")), x.dim());
      Shape s(x.shape().begin(), x.shape().begin() + axis);
      s.insert(s.end(), idx.shape().begin(), idx.shape().end());
      s.insert(s.end(), x.shape().begin() + axis + 1, x.shape().end());
      return {index_select(x, axis, cast(idx, DType::Int64).reshape({-1})).reshape(s)};
    }, {}, false)));

OpDefiner d_scatter_add(detail::reads_onnx(make(
    "scatter_add", {"x", "index", "src"}, {"axis:int"}, detail::infer_scatter,
    [](const GradContext& c, const Grads& g) -> Grads {
      int64_t ax = c.attrs.get_int("axis");
      const Tensor& idx = c.inputs[1];
      Grads r(3);
      r[0] = g[0];
      if (c.needs_grad[2]) {
        Tensor gs = gather(g[0], ax, idx);
        r[2] = gs.shape() == c.inputs[2].shape() ? gs : pad(gs, [&] {
          std::vector<int64_t> pads;
          for (int64_t d = idx.dim() - 1; d >= 0; --d) {
            pads.push_back(0);
            pads.push_back(c.inputs[2].shape()[d] - idx.shape()[d]);
          }
          return pads;
        }());
      }
      return r;
    },
    {{"Slice", "ScatterElements"}, write_scatter_add}, {0, 2}),
    onnx_reader({"ScatterElements", "Scatter"}, read_scatter_elements)));

OpDefiner d_one_hot(detail::reads_mindspore(detail::reads_onnx(make(
    "one_hot", {"indices"}, {"num_classes:int"},
    [](const Metas& in, const Attrs& a) -> Metas {
      check_index(in[0], "indices");
      int64_t n = a.get_int("num_classes");
      KILN_CHECK(n > 0, "num_classes must be positive, got ", n);
      Shape s = in[0].shape;
      s.push_back(n);
      return {{true, s, DType::Int64, in[0].device}};
    },
    nullptr, {{"OneHot"}, write_one_hot}, {}),
    onnx_reader({"OneHot"}, read_one_hot, {1})),
    // MindSpore's OneHot (indices, depth, on_value, off_value), on the last axis.
    onnx_reader({"OneHot"}, [](const OnnxReader& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
      if (n.i("axis", -1) != -1) n.unsupported("axis ", n.i("axis", -1), " (Kiln reads the last axis, -1)");
      const Tensor& on = n.input(in, 2);
      const auto depth = static_cast<int64_t>(n.scalar_value(n.input(in, 1), "depth"));
      if (depth <= 0) n.fail("depth must be positive, got ", depth);
      const Tensor hot = cast(one_hot(cast(n.input(in, 0), DType::Int64), depth), on.dtype());
      const Tensor off = cast(n.input(in, 3), on.dtype());
      return {hot * (on - off) + off};
    }, {}, false)));

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  if (padding_idx < 0) return call1(KILN_OP("embedding"), {weight, indices});
  return call1(KILN_OP("embedding"), {weight, indices}, {{"padding_idx", padding_idx}});
}
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index) {
  return call1(KILN_OP("gather"), {x, index}, {{"axis", axis}});
}
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index) {
  return call1(KILN_OP("index_select"), {x, index}, {{"axis", axis}});
}
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  return call1(KILN_OP("scatter_add"), {x, index, src}, {{"axis", axis}});
}
Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  return call1(KILN_OP("one_hot"), {indices}, {{"num_classes", num_classes}});
}

namespace {

// The flat position in x.shape[from:from + k] of each index tuple of
// `indices` [..., k] (negative indices wrapped), checked against the sizes.
Tensor flat_positions(const Tensor& indices, const Shape& x, int64_t from, const char* what) {
  KILN_CHECK(indices.dim() >= 1 && (indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32), what,
             ": indices must be an int64 or int32 tensor of index tuples [..., k], got ", indices.meta_str());
  const int64_t k = indices.shape().back();
  KILN_CHECK(k >= 1 && from + k <= static_cast<int64_t>(x.size()), what, ": index tuples of ", k,
             " values do not fit the ", x.size() - from, " indexable axes of ", shape_str(x));
  const Tensor idx = cast(indices, DType::Int64);
  Tensor flat;
  for (int64_t j = 0; j < k; ++j) {
    const Tensor size = scalar_tensor(static_cast<double>(x[from + j]), DType::Int64);
    Tensor i = idx.slice(-1, j, j + 1).squeeze(-1);
    i = where(lt(i, zeros({}, DType::Int64)), i + size, i);
    flat = j == 0 ? i : flat * size + i;
  }
  return flat;
}

}  // namespace

Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims) {
  const Shape& xs = x.shape();
  KILN_CHECK(batch_dims >= 0 && batch_dims < x.dim() && batch_dims < indices.dim(), "gather_nd: batch_dims ", batch_dims,
             " must be below the ranks of x ", shape_str(xs), " and indices ", shape_str(indices.shape()));
  for (int64_t d = 0; d < batch_dims; ++d)
    KILN_CHECK(xs[d] == indices.shape()[d], "gather_nd: batch axis ", d, " is ", xs[d], " in x but ",
               indices.shape()[d], " in indices");
  const int64_t k = indices.dim() >= 1 ? indices.shape().back() : 0;
  Tensor flat = flat_positions(indices, xs, batch_dims, "gather_nd");  // [B..., M...]
  int64_t batch = 1, picked = 1;
  for (int64_t d = 0; d < batch_dims; ++d) batch *= xs[d];
  for (int64_t d = batch_dims; d < batch_dims + k; ++d) picked *= xs[d];
  Shape rest(xs.begin() + batch_dims + k, xs.end()), rows = {batch * picked};
  rows.insert(rows.end(), rest.begin(), rest.end());
  if (batch_dims > 0) {
    const Tensor per_batch = flat.reshape({batch, -1});
    flat = per_batch + arange(batch, DType::Int64, flat.device()).reshape({batch, 1}) *
                           scalar_tensor(static_cast<double>(picked), DType::Int64);
  }
  Shape out(indices.shape().begin(), indices.shape().end() - 1);
  out.insert(out.end(), rest.begin(), rest.end());
  return index_select(x.reshape(rows), 0, flat.reshape({-1})).reshape(out);
}

Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction) {
  const std::map<std::string, std::string> reduce = {{"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
  KILN_CHECK(reduction == "none" || reduce.count(reduction), "scatter_nd: reduction '", reduction,
             "' is not one of none, add, mul, max, min");
  const Shape& xs = x.shape();
  Tensor flat = flat_positions(indices, xs, 0, "scatter_nd").reshape({-1});
  const int64_t k = indices.shape().back(), n = flat.numel();
  int64_t picked = 1;
  for (int64_t d = 0; d < k; ++d) picked *= xs[d];
  Shape rest(xs.begin() + k, xs.end()), expected(indices.shape().begin(), indices.shape().end() - 1);
  expected.insert(expected.end(), rest.begin(), rest.end());
  KILN_CHECK(updates.shape() == expected, "scatter_nd: updates must have shape ", shape_str(expected),
             " (indices.shape[:-1] + x.shape[k:]), got ", shape_str(updates.shape()));
  int64_t width = 1;
  for (int64_t d : rest) width *= d;
  const Tensor rows = x.reshape({picked, width}), src = updates.reshape({n, width});
  const Tensor index = flat.reshape({n, 1}).expand({n, width}).contiguous();
  if (reduction != "none") return scatter_reduce(rows, 0, index, src, reduce.at(reduction)).reshape(xs);
  // Replacing: the rows some tuple names take the updates (repeated tuples add up), the others keep x.
  const Tensor hits = scatter_add(zeros({picked, width}, DType::Int64, x.device()), 0, index,
                                  ones({n, width}, DType::Int64, x.device()));
  const Tensor written = scatter_add(zeros({picked, width}, x.dtype(), x.device()), 0, index, src);
  return where(gt(hits, zeros({}, DType::Int64)), written, rows).reshape(xs);
}

}  // namespace kiln

#include "ops/op_helpers.h"

#include <algorithm>

namespace kiln::detail {

OpDef make_op(const char* name, std::vector<std::string> inputs, std::vector<std::string> attrs, InferFn infer,
              GradFn grad, OnnxExport onnx, uint32_t tags, std::vector<std::string> outputs) {
  OpDef d;
  d.name = name;
  d.inputs = std::move(inputs);
  d.outputs = std::move(outputs);
  d.attrs = std::move(attrs);
  d.infer = std::move(infer);
  d.grad = std::move(grad);
  d.onnx = std::move(onnx);
  d.tags = tags | (d.grad ? 0u : static_cast<uint32_t>(kTagNondifferentiable));
  return d;
}

OpDef read_onnx_as(OpDef d, const std::string& type) {
  const std::string op = d.name;
  const size_t arity = d.inputs.size();
  d.onnx_import = onnx_reader({type}, [op, arity](const OnnxReader& n, const std::vector<Tensor>& in) {
    if (in.size() > arity) n.fail("takes ", arity, " input(s), got ", in.size());
    std::vector<Tensor> args;
    for (size_t i = 0; i < arity; ++i) args.push_back(n.input(in, i));
    if (arity == 2) args[1] = onnx_legacy_broadcast(n, args[0], args[1]);
    return call(OpRegistry::instance().get(op), args);
  });
  return d;
}

OpDef read_mindspore_as(OpDef d, std::vector<std::string> primitives) {
  const std::string op = d.name;
  const size_t arity = d.inputs.size();
  d.mindspore_import = onnx_reader(std::move(primitives), [op, arity](const OnnxReader& n, const std::vector<Tensor>& in) {
    if (in.size() != arity) n.fail("takes ", arity, " input(s), got ", in.size());
    std::vector<Tensor> args;
    for (size_t i = 0; i < arity; ++i) args.push_back(n.input(in, i));
    if (arity == 2 && args[1].dtype() != args[0].dtype()) args[1] = cast(args[1], args[0].dtype());  // a Python scalar
    return call(OpRegistry::instance().get(op), args);
  });
  return d;
}

std::vector<int64_t> mindspore_hw(const OnnxReader& n, const std::string& name, int64_t fallback) {
  std::vector<int64_t> v = n.ints(name, {fallback, fallback});
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() == 4) v.erase(v.begin(), v.begin() + 2);
  if (v.size() != 2) n.fail("attribute '", name, "' should hold 1, 2 or 4 values, got ", v.size());
  for (int64_t x : v)
    if (x < 1) n.fail("attribute '", name, "' must be positive, got ", x);
  return v;
}

std::string mindspore_pad_mode(const OnnxReader& n, const std::string& fallback) {
  std::string mode = n.s("pad_mode", "");
  if (mode.empty() && n.has("pad_mode")) {
    static const char* const names[] = {"pad", "same", "valid"};
    const int64_t i = n.i("pad_mode", 0);
    if (i < 0 || i > 2) n.fail("pad_mode ", i, " is not one of 0 (pad), 1 (same), 2 (valid)");
    return names[i];
  }
  if (mode.empty()) return fallback;
  for (char& c : mode) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (mode != "pad" && mode != "same" && mode != "valid") n.fail("pad_mode '", mode, "' is not one of pad, same, valid");
  return mode;
}

std::vector<int64_t> same_padding(const Shape& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                                  const std::vector<int64_t>& dilation) {
  std::vector<int64_t> pads;
  for (size_t i = 0; i < 2; ++i) {
    const int64_t in = x[x.size() - 2 + i], out = (in + stride[i] - 1) / stride[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in);
    pads.push_back(total / 2);
    pads.push_back(total - total / 2);
  }
  return pads;
}

std::string mindspore_data_format(const OnnxReader& n) {
  if (!n.has("format")) return "NCHW";
  const std::string format = n.s("format", "");
  if (!format.empty()) return format;
  static const char* const names[] = {"NCHW", "NHWC"};  // MindSpore's enum, where the export kept it
  const int64_t i = n.i("format", 0);
  if (i < 0 || i > 1) n.fail("format ", i, " is not one of 0 (NCHW), 1 (NHWC)");
  return names[i];
}

void require_nchw(const OnnxReader& n) {
  const std::string format = mindspore_data_format(n);
  if (format != "NCHW") n.unsupported("data format ", format, " (Kiln reads NCHW; export the model with NCHW)");
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "an axis appears twice in the axes list");
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) out.push_back(in[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor unreduce(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& axes, bool keepdim) {
  if (keepdim) return g;
  return g.reshape(reduced_shape(in_shape, axes, true));
}

std::string updates_like_index(OnnxWriter& w) {
  const Shape &index = w.in_shape(1), &src = w.in_shape(2);
  if (index == src) return w.in(2);
  std::vector<int64_t> axes(index.size());
  for (size_t d = 0; d < index.size(); ++d) axes[d] = static_cast<int64_t>(d);
  const std::string updates = w.unique("scatter_src");
  w.node("Slice", {w.in(2), w.ints(std::vector<int64_t>(index.size(), 0), "starts"),
                   w.ints(std::vector<int64_t>(index.begin(), index.end()), "ends"), w.ints(axes, "axes")},
         {updates});
  return updates;
}

std::vector<TensorMeta> infer_scatter(const Metas& in, const Attrs& a) {
  KILN_CHECK(in[1].dtype == DType::Int64 || in[1].dtype == DType::Int32, "index must be int64 or int32, got ",
             dtype_name(in[1].dtype), "; convert it with .to(kiln::DType::Int64)");
  check_same_dtype(in, 0, 2);
  const int64_t r = static_cast<int64_t>(in[0].shape.size());
  const int64_t ax = normalize_axis(a.get_int("axis"), r);
  KILN_CHECK(in[1].shape.size() == in[0].shape.size() && in[2].shape.size() == in[0].shape.size(),
             "x, index and src must have the same rank");
  for (int64_t d = 0; d < r; ++d) {
    KILN_CHECK(in[1].shape[d] <= in[2].shape[d], "index ", shape_str(in[1].shape), " is larger than src ",
               shape_str(in[2].shape), " on axis ", d);
    KILN_CHECK(d == ax || in[1].shape[d] <= in[0].shape[d], "index ", shape_str(in[1].shape), " is larger than x ",
               shape_str(in[0].shape), " on axis ", d);
  }
  return {in[0]};
}

}  // namespace kiln::detail

// One writer per Kiln op: how it is expressed in ONNX opset 17.
#include <cmath>
#include <functional>
#include <unordered_map>

#include "io/onnx_export.h"
#include "io/onnx_tensor.h"
#include "kiln/error.h"

namespace kiln::onnx_io {
namespace {

using graph::Node;
using Writer = std::function<void(ExportContext&, const Node&)>;

struct Io {
  ExportContext& ctx;
  const Node& n;
  std::string in(size_t i) const { return i < n.inputs.size() && n.inputs[i] >= 0 ? ctx.name(n.inputs[i]) : ""; }
  const std::string& out(size_t i = 0) const { return ctx.name(n.outputs.at(i)); }
  const Shape& in_shape(size_t i = 0) const { return ctx.meta(n.inputs.at(i)).shape; }
  const Shape& out_shape(size_t i = 0) const { return ctx.meta(n.outputs.at(i)).shape; }
  DType dtype() const { return ctx.meta(n.inputs.at(0)).dtype; }
  bool output_used(size_t i) const {
    int v = n.outputs.at(i);
    for (const Node& m : ctx.g.nodes)
      if (!m.removed)
        for (int u : m.inputs)
          if (u == v) return true;
    for (int o : ctx.g.outputs)
      if (o == v) return true;
    return false;
  }
  int64_t axis(const char* name = "axis", int64_t fallback = 0) const { return n.attrs.get_int(name, fallback); }
};

Writer same(const char* op_type) {
  return [op_type](ExportContext& ctx, const Node& n) {
    Io io{ctx, n};
    std::vector<std::string> ins;
    for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(io.in(i));
    ctx.node(op_type, ins, {io.out()});
  };
}

void write_reduce(ExportContext& ctx, const Node& n, const char* op_type, bool axes_as_input) {
  Io io{ctx, n};
  auto axes = n.attrs.get_ints("axes", {});
  int64_t keep = n.attrs.get_bool("keepdim", false) ? 1 : 0;
  std::vector<std::string> ins = {io.in(0)};
  if (axes_as_input && !axes.empty()) ins.push_back(ctx.ints(axes, "axes"));
  auto& node = ctx.node(op_type, ins, {io.out()});
  if (!axes_as_input && !axes.empty()) set_attr(node, "axes", axes);
  set_attr(node, "keepdims", keep);
}

// y = unary(x) followed by more ops: the writers that expand into chains.
void write_gelu(ExportContext& ctx, const Node& n) {
  Io io{ctx, n};
  DType dt = io.dtype();
  std::string x = io.in(0);
  std::string inner;
  if (n.attrs.get_string("approximate", "none") == "tanh") {
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    std::string x3 = ctx.unique("gelu_x3"), t = ctx.unique("gelu_t"), s = ctx.unique("gelu_s"), u = ctx.unique("gelu_u");
    ctx.node("Pow", {x, ctx.scalar(3, dt, "three")}, {x3});
    std::string c = ctx.unique("gelu_c");
    ctx.node("Mul", {x3, ctx.scalar(0.044715, dt, "gelu_k")}, {c});
    ctx.node("Add", {x, c}, {t});
    ctx.node("Mul", {t, ctx.scalar(std::sqrt(2.0 / M_PI), dt, "gelu_sqrt_2_over_pi")}, {s});
    ctx.node("Tanh", {s}, {u});
    inner = u;
  } else {
    // 0.5 x (1 + erf(x / sqrt(2)))
    std::string d = ctx.unique("gelu_scaled"), e = ctx.unique("gelu_erf");
    ctx.node("Mul", {x, ctx.scalar(M_SQRT1_2, dt, "gelu_rsqrt2")}, {d});
    ctx.node("Erf", {d}, {e});
    inner = e;
  }
  std::string p = ctx.unique("gelu_1p"), h = ctx.unique("gelu_half_x");
  ctx.node("Add", {inner, ctx.scalar(1, dt, "one")}, {p});
  ctx.node("Mul", {x, ctx.scalar(0.5, dt, "half")}, {h});
  ctx.node("Mul", {h, p}, {io.out()});
}

void write_var(ExportContext& ctx, const Node& n, bool take_sqrt) {
  Io io{ctx, n};
  DType dt = io.dtype();
  auto axes = n.attrs.get_ints("axes", {});
  const Shape& s = io.in_shape();
  if (axes.empty())
    for (size_t i = 0; i < s.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  int64_t count = 1;
  for (int64_t a : axes) count *= s[a < 0 ? a + static_cast<int64_t>(s.size()) : a];
  int64_t correction = n.attrs.get_int("correction", 1);
  std::string mean = ctx.unique("var_mean"), d = ctx.unique("var_diff"), sq = ctx.unique("var_sq"), sum = ctx.unique("var_sum");
  auto& m = ctx.node("ReduceMean", {io.in(0)}, {mean});
  set_attr(m, "axes", axes);
  set_attr(m, "keepdims", int64_t{1});
  ctx.node("Sub", {io.in(0), mean}, {d});
  ctx.node("Mul", {d, d}, {sq});
  auto& r = ctx.node("ReduceSum", {sq, ctx.ints(axes, "axes")}, {sum});
  set_attr(r, "keepdims", int64_t{n.attrs.get_bool("keepdim", false) ? 1 : 0});
  double denom = static_cast<double>(std::max<int64_t>(count - correction, 0));
  if (!take_sqrt) {
    ctx.node("Div", {sum, ctx.scalar(denom, dt, "var_count")}, {io.out()});
    return;
  }
  std::string var = ctx.unique("var");
  ctx.node("Div", {sum, ctx.scalar(denom, dt, "var_count")}, {var});
  ctx.node("Sqrt", {var}, {io.out()});
}

void write_conv(ExportContext& ctx, const Node& n, bool transposed) {
  Io io{ctx, n};
  auto pad = n.attrs.get_ints("padding", {0, 0});
  const Shape& w = io.in_shape(1);
  std::string y = io.out();
  bool relu = n.attrs.get_string("activation", "none") == "relu";
  if (relu) y = ctx.unique("conv_out");
  auto& c = ctx.node(transposed ? "ConvTranspose" : "Conv", {io.in(0), io.in(1), io.in(2)}, {y});
  set_attr(c, "kernel_shape", std::vector<int64_t>{w[2], w[3]});
  set_attr(c, "strides", n.attrs.get_ints("stride", {1, 1}));
  set_attr(c, "pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]});
  set_attr(c, "dilations", n.attrs.get_ints("dilation", {1, 1}));
  set_attr(c, "group", n.attrs.get_int("groups", 1));
  if (transposed) set_attr(c, "output_padding", n.attrs.get_ints("output_padding", {0, 0}));
  if (relu) ctx.node("Relu", {y}, {io.out()});
}

::onnx::NodeProto& pool_node(ExportContext& ctx, const Node& n, const char* op_type) {
  Io io{ctx, n};
  auto pad = n.attrs.get_ints("padding", {0, 0});
  auto kernel = n.attrs.get_ints("kernel");
  auto& p = ctx.node(op_type, {io.in(0)}, {io.out()});
  set_attr(p, "kernel_shape", kernel);
  set_attr(p, "strides", n.attrs.get_ints("stride", kernel));
  set_attr(p, "pads", std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]});
  return p;
}

void require_unused(const Io& io, size_t from, const char* what) {
  for (size_t i = from; i < io.n.outputs.size(); ++i)
    KILN_CHECK(!io.output_used(i), "export: the graph uses ", what, " of '", io.n.name(),
               "', which ONNX does not provide; export the model in inference mode (set_train(false))");
}

// A constant-filled initializer, for optional weights ONNX requires.
std::string filled(ExportContext& ctx, const Shape& shape, double fill, DType dtype, const char* hint) {
  auto* init = ctx.out.add_initializer();
  to_proto(full(shape, fill, dtype), *init);
  init->set_name(ctx.unique(hint));
  return init->name();
}

std::string param_or(ExportContext& ctx, const Io& io, size_t i, double fill, const Shape& shape, const char* hint) {
  return io.in(i).empty() ? filled(ctx, shape, fill, io.dtype(), hint) : io.in(i);
}

const std::unordered_map<std::string, Writer>& writers() {
  static const std::unordered_map<std::string, Writer> table = [] {
    std::unordered_map<std::string, Writer> w;
    for (auto [kiln_op, onnx_op] : std::vector<std::pair<const char*, const char*>>{
             {"abs", "Abs"}, {"neg", "Neg"}, {"exp", "Exp"}, {"log", "Log"}, {"sqrt", "Sqrt"}, {"sin", "Sin"},
             {"cos", "Cos"}, {"tanh", "Tanh"}, {"sigmoid", "Sigmoid"}, {"relu", "Relu"}, {"erf", "Erf"},
             {"ceil", "Ceil"}, {"floor", "Floor"}, {"round", "Round"}, {"sign", "Sign"}, {"copy", "Identity"},
             {"add", "Add"}, {"sub", "Sub"}, {"mul", "Mul"}, {"div", "Div"}, {"pow", "Pow"}, {"maximum", "Max"},
             {"minimum", "Min"}, {"eq", "Equal"}, {"lt", "Less"}, {"gt", "Greater"}, {"le", "LessOrEqual"},
             {"ge", "GreaterOrEqual"}, {"where", "Where"}, {"matmul", "MatMul"}})
      w[kiln_op] = same(onnx_op);
    w["rsqrt"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::string s = ctx.unique("sqrt");
      ctx.node("Sqrt", {io.in(0)}, {s});
      ctx.node("Reciprocal", {s}, {io.out()});
    };
    w["log1p"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::string s = ctx.unique("one_plus");
      ctx.node("Add", {io.in(0), ctx.scalar(1, io.dtype(), "one")}, {s});
      ctx.node("Log", {s}, {io.out()});
    };
    w["silu"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::string s = ctx.unique("sigmoid");
      ctx.node("Sigmoid", {io.in(0)}, {s});
      ctx.node("Mul", {io.in(0), s}, {io.out()});
    };
    w["ne"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::string s = ctx.unique("equal");
      ctx.node("Equal", {io.in(0), io.in(1)}, {s});
      ctx.node("Not", {s}, {io.out()});
    };
    w["gelu"] = write_gelu;
    w["var"] = [](ExportContext& ctx, const Node& n) { write_var(ctx, n, false); };
    w["std"] = [](ExportContext& ctx, const Node& n) { write_var(ctx, n, true); };
    w["leaky_relu"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("LeakyRelu", {io.in(0)}, {io.out()}), "alpha",
               static_cast<float>(n.attrs.get_float("negative_slope", 0.01)));
    };
    w["softplus"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      double beta = n.attrs.get_float("beta", 1.0);
      if (beta == 1.0) {
        ctx.node("Softplus", {io.in(0)}, {io.out()});
        return;
      }
      std::string bx = ctx.unique("beta_x"), sp = ctx.unique("softplus");
      ctx.node("Mul", {io.in(0), ctx.scalar(beta, io.dtype(), "beta")}, {bx});
      ctx.node("Softplus", {bx}, {sp});
      ctx.node("Div", {sp, ctx.scalar(beta, io.dtype(), "beta")}, {io.out()});
    };
    w["clamp"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::string lo = n.attrs.has("min") ? ctx.scalar(n.attrs.get_float("min"), io.dtype(), "min") : "";
      std::string hi = n.attrs.has("max") ? ctx.scalar(n.attrs.get_float("max"), io.dtype(), "max") : "";
      ctx.node("Clip", {io.in(0), lo, hi}, {io.out()});
    };
    w["cast"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("Cast", {io.in(0)}, {io.out()}), "to", int64_t{onnx_dtype(n.attrs.get_dtype("dtype"))});
    };
    w["linear"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      if (io.in_shape().size() == 2) {
        set_attr(ctx.node("Gemm", {io.in(0), io.in(1), io.in(2)}, {io.out()}), "transB", int64_t{1});
        return;
      }
      std::string wt = ctx.unique("weight_t"), y = io.in(2).empty() ? io.out() : ctx.unique("matmul");
      set_attr(ctx.node("Transpose", {io.in(1)}, {wt}), "perm", std::vector<int64_t>{1, 0});
      ctx.node("MatMul", {io.in(0), wt}, {y});
      if (!io.in(2).empty()) ctx.node("Add", {y, io.in(2)}, {io.out()});
    };
    w["conv2d"] = [](ExportContext& ctx, const Node& n) { write_conv(ctx, n, false); };
    w["conv_transpose2d"] = [](ExportContext& ctx, const Node& n) { write_conv(ctx, n, true); };
    w["max_pool2d"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      require_unused(io, 1, "the argmax indices");
      set_attr(pool_node(ctx, n, "MaxPool"), "dilations", n.attrs.get_ints("dilation", {1, 1}));
    };
    w["avg_pool2d"] = [](ExportContext& ctx, const Node& n) {
      set_attr(pool_node(ctx, n, "AveragePool"), "count_include_pad",
               int64_t{n.attrs.get_bool("count_include_pad", true) ? 1 : 0});
    };
    w["adaptive_avg_pool2d"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      const Shape& x = io.in_shape();
      const Shape& y = io.out_shape();
      if (y[2] == 1 && y[3] == 1) {
        ctx.node("GlobalAveragePool", {io.in(0)}, {io.out()});
        return;
      }
      KILN_CHECK(x[2] % y[2] == 0 && x[3] % y[3] == 0, "export: adaptive_avg_pool2d from ", shape_str(x), " to ",
                 shape_str(y), " has uneven windows, which ONNX AveragePool cannot express; choose an output size "
                 "that divides the input size");
      auto& p = ctx.node("AveragePool", {io.in(0)}, {io.out()});
      std::vector<int64_t> k = {x[2] / y[2], x[3] / y[3]};
      set_attr(p, "kernel_shape", k);
      set_attr(p, "strides", k);
    };
    w["batch_norm"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      KILN_CHECK(!n.attrs.get_bool("training", true),
                 "export: batch_norm in training mode; export calls set_train(false), so a Cell that forces "
                 "training statistics cannot be exported");
      require_unused(io, 1, "the batch statistics");
      int64_t c = io.in_shape()[1];
      KILN_CHECK(!io.in(3).empty() && !io.in(4).empty(),
                 "export: batch_norm without running statistics has no inference form; track running statistics");
      auto& b = ctx.node("BatchNormalization",
                         {io.in(0), param_or(ctx, io, 1, 1, {c}, "bn_scale"), param_or(ctx, io, 2, 0, {c}, "bn_bias"),
                          io.in(3), io.in(4)},
                         {io.out()});
      set_attr(b, "epsilon", static_cast<float>(n.attrs.get_float("eps", 1e-5)));
    };
    w["layer_norm"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      require_unused(io, 1, "the saved statistics");
      int64_t nd = n.attrs.get_int("normalized_ndim");
      const Shape& x = io.in_shape();
      Shape normalized(x.end() - nd, x.end());
      auto& l = ctx.node("LayerNormalization",
                         {io.in(0), param_or(ctx, io, 1, 1, normalized, "ln_scale"), param_or(ctx, io, 2, 0, normalized, "ln_bias")},
                         {io.out()});
      set_attr(l, "axis", -nd);
      set_attr(l, "epsilon", static_cast<float>(n.attrs.get_float("eps", 1e-5)));
    };
    w["group_norm"] = [](ExportContext& ctx, const Node& n) {
      // InstanceNormalization over [N, G, rest], then the per-channel affine.
      Io io{ctx, n};
      require_unused(io, 1, "the saved statistics");
      const Shape& x = io.in_shape();
      int64_t groups = n.attrs.get_int("groups");
      std::string r = ctx.unique("gn_grouped"), in = ctx.unique("gn_normed"), back = ctx.unique("gn_back");
      ctx.node("Reshape", {io.in(0), ctx.ints({ctx.dynamic_batch ? 0 : x[0], groups, -1}, "shape")}, {r});
      std::string one = filled(ctx, {groups}, 1, io.dtype(), "gn_one"), zero = filled(ctx, {groups}, 0, io.dtype(), "gn_zero");
      set_attr(ctx.node("InstanceNormalization", {r, one, zero}, {in}), "epsilon",
               static_cast<float>(n.attrs.get_float("eps", 1e-5)));
      std::vector<int64_t> shape(x.begin(), x.end());
      if (ctx.dynamic_batch) shape[0] = 0;
      std::string y = io.in(1).empty() && io.in(2).empty() ? io.out() : back;
      ctx.node("Reshape", {in, ctx.ints(shape, "shape")}, {y});
      if (y == io.out()) return;
      std::vector<int64_t> per_channel(x.size() - 1, 1);
      per_channel[0] = x[1];
      std::string cur = y;
      for (auto [i, op] : {std::pair{size_t{1}, "Mul"}, std::pair{size_t{2}, "Add"}}) {
        if (io.in(i).empty()) continue;
        std::string p = ctx.unique("gn_param"), next = (i == 2 || io.in(2).empty()) ? io.out() : ctx.unique("gn_scaled");
        ctx.node("Reshape", {io.in(i), ctx.ints(per_channel, "shape")}, {p});
        ctx.node(op, {cur, p}, {next});
        cur = next;
      }
    };
    w["dropout"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      KILN_CHECK(!n.attrs.get_bool("training", true), "export: dropout in training mode");
      require_unused(io, 1, "the dropout mask");
      ctx.node("Identity", {io.in(0)}, {io.out()});
    };
    w["softmax"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("Softmax", {io.in(0)}, {io.out()}), "axis", io.axis("axis", -1));
    };
    w["log_softmax"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("LogSoftmax", {io.in(0)}, {io.out()}), "axis", io.axis("axis", -1));
    };
    w["view"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::vector<int64_t> shape(io.out_shape().begin(), io.out_shape().end());
      if (ctx.dynamic_batch && !shape.empty()) {
        KILN_CHECK(!io.in_shape().empty() && io.in_shape()[0] == shape[0],
                   "export with a dynamic batch: a reshape from ", shape_str(io.in_shape()), " to ", shape_str(io.out_shape()),
                   " changes axis 0, so it cannot follow the batch size; export with fixed shapes "
                   "(dynamic_batch off) or keep the batch axis first and whole");
        shape[0] = 0;  // copy the input's batch size
      }
      ctx.node("Reshape", {io.in(0), ctx.ints(shape, "shape")}, {io.out()});
    };
    w["permute"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("Transpose", {io.in(0)}, {io.out()}), "perm", n.attrs.get_ints("order"));
    };
    w["expand"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::vector<int64_t> shape(io.out_shape().begin(), io.out_shape().end());
      const Shape& x = io.in_shape();
      if (ctx.dynamic_batch && x.size() == shape.size() && !x.empty() && x[0] == shape[0]) shape[0] = 1;
      ctx.node("Expand", {io.in(0), ctx.ints(shape, "shape")}, {io.out()});
    };
    w["split"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::vector<std::string> outs;
      for (size_t i = 0; i < n.outputs.size(); ++i) outs.push_back(io.out(i));
      set_attr(ctx.node("Split", {io.in(0), ctx.ints(n.attrs.get_ints("sizes"), "split")}, outs), "axis", io.axis());
    };
    w["concat"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      std::vector<std::string> ins;
      for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(io.in(i));
      set_attr(ctx.node("Concat", ins, {io.out()}), "axis", io.axis());
    };
    w["slice"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      ctx.node("Slice",
               {io.in(0), ctx.ints({n.attrs.get_int("start")}, "starts"), ctx.ints({n.attrs.get_int("end")}, "ends"),
                ctx.ints({io.axis()}, "axes"), ctx.ints({n.attrs.get_int("step", 1)}, "steps")},
               {io.out()});
    };
    w["embedding"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("Gather", {io.in(0), io.in(1)}, {io.out()}), "axis", int64_t{0});
    };
    w["index_select"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("Gather", {io.in(0), io.in(1)}, {io.out()}), "axis", io.axis());
    };
    w["gather"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      set_attr(ctx.node("GatherElements", {io.in(0), io.in(1)}, {io.out()}), "axis", io.axis());
    };
    w["sum"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceSum", true); };
    w["mean"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceMean", false); };
    w["amax"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceMax", false); };
    w["amin"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceMin", false); };
    w["prod"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceProd", false); };
    w["logsumexp"] = [](ExportContext& ctx, const Node& n) { write_reduce(ctx, n, "ReduceLogSumExp", false); };
    for (auto [kiln_op, onnx_op] : {std::pair{"argmax", "ArgMax"}, std::pair{"argmin", "ArgMin"}})
      w[kiln_op] = [onnx_op = onnx_op](ExportContext& ctx, const Node& n) {
        Io io{ctx, n};
        auto& a = ctx.node(onnx_op, {io.in(0)}, {io.out()});
        set_attr(a, "axis", io.axis());
        set_attr(a, "keepdims", int64_t{n.attrs.get_bool("keepdim", false) ? 1 : 0});
      };
    w["cumsum"] = [](ExportContext& ctx, const Node& n) {
      Io io{ctx, n};
      auto& c = ctx.node("CumSum", {io.in(0), ctx.scalar(static_cast<double>(io.axis()), DType::Int64, "axis")}, {io.out()});
      set_attr(c, "reverse", int64_t{n.attrs.get_bool("reverse", false) ? 1 : 0});
    };
    for (auto [kiln_op, upper] : {std::pair{"triu", int64_t{1}}, std::pair{"tril", int64_t{0}}})
      w[kiln_op] = [upper = upper](ExportContext& ctx, const Node& n) {
        Io io{ctx, n};
        auto& t = ctx.node("Trilu", {io.in(0), ctx.scalar(static_cast<double>(n.attrs.get_int("diagonal", 0)),
                                                          DType::Int64, "k")},
                           {io.out()});
        set_attr(t, "upper", upper);
      };
    return w;
  }();
  return table;
}

}  // namespace

bool can_export(const std::string& op) { return writers().count(op) > 0; }

bool export_node(ExportContext& ctx, const Node& n) {
  if (!n.op) return false;
  auto it = writers().find(n.op->name);
  if (it == writers().end()) return false;
  it->second(ctx, n);
  return true;
}

}  // namespace kiln::onnx_io

// Every registered op, callable by name with Python arguments; the schemas
// that kiln.ops generates its functions from; direct bindings of the ops
// whose per-call cost matters most from Python.
#include "bindings.h"
#include "kiln/op_library.h"

namespace kiln::python {
namespace {

std::string type_name_of(py::handle v) { return py::str(v.get_type().attr("__name__")); }

AttrValue attr_value(const OpDef& op, const std::string& name, const std::string& kind, py::handle v) {
  try {
    if (kind == "int") return py::cast<int64_t>(v);
    if (kind == "float") return py::cast<double>(v);
    if (kind == "bool") return py::cast<bool>(v);
    if (kind == "string") return py::cast<std::string>(v);
    if (kind == "dtype") return dtype_of(v);
    if (kind == "ints") {
      if (py::isinstance<py::int_>(v)) return std::vector<int64_t>{py::cast<int64_t>(v)};
      return py::cast<std::vector<int64_t>>(v);
    }
    if (kind == "floats") {
      if (py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v)) return std::vector<double>{py::cast<double>(v)};
      return py::cast<std::vector<double>>(v);
    }
    // An attribute of any kind: by the Python type of the value.
    if (PyBool_Check(v.ptr())) return py::cast<bool>(v);
    if (PyLong_Check(v.ptr())) return py::cast<int64_t>(v);
    if (PyFloat_Check(v.ptr())) return py::cast<double>(v);
    if (py::isinstance<py::str>(v)) return py::cast<std::string>(v);
    if (py::isinstance<DType>(v)) return py::cast<DType>(v);
    try {
      return py::cast<std::vector<int64_t>>(v);
    } catch (const py::cast_error&) {
      return py::cast<std::vector<double>>(v);
    }
  } catch (const py::cast_error&) {
    throw py::type_error(op.name + ": attribute '" + name + "' takes " + (kind.empty() ? "a number, string or list" : kind) +
                         ", not " + type_name_of(v));
  }
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def(
      "load_op_library", [](const std::string& path) { return load_op_library(path).name; }, py::arg("path"),
      "Loads an op package (a shared library built with kiln_add_op_library) and registers its ops; returns the "
      "package's name.");
  m.def("load_op_libraries_from_environment", &load_op_libraries_from_environment,
        "Loads the op packages KILN_PLUGIN_PATH names; returns their names.");
  m.def("op_schemas", [] {
    py::list out;
    for (const OpDef* op : OpRegistry::instance().all()) {
      py::dict d;
      d["name"] = op->name;
      d["package"] = op_library_of(op->name);  // "" for Kiln's own
      d["inputs"] = op->inputs;
      d["outputs"] = op->outputs;
      d["attrs"] = op->attrs;
      d["tags"] = tags_str(op->tags);
      d["differentiable"] = op->differentiable();
      d["cpu_dtypes"] = op->dtypes(DeviceType::CPU);
      out.append(d);
    }
    return out;
  }, "The schema of every registered op: name, inputs, outputs, attributes, tags.");

  m.def("call_op", [](const std::string& name, py::sequence args, py::dict kwargs) -> py::object {
    const OpDef& op = OpRegistry::instance().get(name);
    std::vector<Tensor> inputs;
    Tensor like;
    for (auto a : args)
      if (py::isinstance<Tensor>(a)) {
        like = py::cast<Tensor>(a);
        break;
      }
    for (auto a : args) {
      if (a.is_none()) {
        inputs.emplace_back();
      } else if (op.variadic() && (py::isinstance<py::list>(a) || py::isinstance<py::tuple>(a))) {
        for (auto e : a) inputs.push_back(like.defined() ? operand(e, like) : to_tensor(e));
      } else {
        inputs.push_back(like.defined() ? operand(a, like) : to_tensor(a));
      }
    }
    Attrs attrs;
    for (auto [k, v] : kwargs) {
      std::string key = py::cast<std::string>(k);
      if (v.is_none()) continue;  // an optional attribute left unset
      std::string kind;
      bool known = false;
      for (const auto& spec : op.attr_specs)
        if (spec.name == key) kind = spec.kind, known = true;
      if (!known) {
        std::string names;
        for (const auto& spec : op.attr_specs) names += (names.empty() ? "" : ", ") + spec.name;
        throw py::type_error(name + "() got an unexpected keyword argument '" + key + "'; its attributes are: " +
                             (names.empty() ? "none" : names));
      }
      attrs.set(key, attr_value(op, key, kind, v));
    }
    std::vector<Tensor> outputs = call(op, inputs, attrs);
    if (outputs.size() == 1) return py::cast(outputs[0]);
    return py::cast(outputs);
  }, py::arg("name"), py::arg("inputs"), py::arg("attrs"),
        "Runs the registered op `name` on inputs with attributes (kiln.ops wraps every op this way).");

  // The arithmetic a Python loop calls most, bound directly (no schema walk
  // per call), with a first overload for two tensors that skips every
  // conversion, and a second for arrays and numbers.
#define KILN_BINARY(NAME)                                                                                    \
  m.def(#NAME, [](const Tensor& a, const Tensor& b) { return NAME(a, b); }, py::arg("input"), py::arg("other")); \
  m.def(#NAME, [](py::handle a, py::handle b) {                                                              \
    if (!py::isinstance<Tensor>(a) && py::isinstance<Tensor>(b)) {                                           \
      Tensor y = py::cast<Tensor>(b);                                                                        \
      return NAME(operand(a, y), y);                                                                         \
    }                                                                                                        \
    Tensor x = to_tensor(a);                                                                                 \
    return NAME(x, operand(b, x));                                                                           \
  }, py::arg("input"), py::arg("other"))
  KILN_BINARY(add);
  KILN_BINARY(sub);
  KILN_BINARY(mul);
  KILN_BINARY(div);
#undef KILN_BINARY
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::arg("input"), py::arg("other"));
  m.def("relu", [](const Tensor& x) { return relu(x); }, py::arg("input"));
  m.def("concat", [](const std::vector<Tensor>& xs, int64_t axis) { return concat(xs, axis); }, py::arg("tensors"),
        py::arg("axis") = 0);
  m.def("stack", [](const std::vector<Tensor>& xs, int64_t axis) { return stack(xs, axis); }, py::arg("tensors"),
        py::arg("axis") = 0);
  m.def("einsum", [](const std::string& eq, py::args operands) {
    std::vector<Tensor> xs;
    for (auto o : operands) xs.push_back(to_tensor(o));
    return einsum(eq, xs);
  }, py::arg("equation"));
  m.def("conv2d", [](const Tensor& x, const Tensor& w, std::optional<Tensor> b, std::vector<int64_t> stride,
                     std::vector<int64_t> padding, std::vector<int64_t> dilation, int64_t groups) {
    auto two = [](std::vector<int64_t> v) { return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v; };
    ConvOptions o;
    o.stride = two(stride), o.padding = two(padding), o.dilation = two(dilation), o.groups = groups;
    return conv2d(x, w, b.value_or(Tensor()), o);
  }, py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = std::vector<int64_t>{1},
        py::arg("padding") = std::vector<int64_t>{0}, py::arg("dilation") = std::vector<int64_t>{1}, py::arg("groups") = 1);
  m.def("cross_entropy", [](const Tensor& logits, const Tensor& target, std::string reduction, double label_smoothing,
                            int64_t ignore_index) {
    CrossEntropyOptions o;
    o.reduction = reduction, o.label_smoothing = label_smoothing, o.ignore_index = ignore_index;
    return cross_entropy(logits, target, o);
  }, py::arg("logits"), py::arg("target"), py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0,
        py::arg("ignore_index") = -100);
}

}  // namespace kiln::python

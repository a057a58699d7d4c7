// Cells (subclassable in Python, nestable with C++ cells both ways), the
// built-in layers and losses, initialisers, graph mode.
#include "bindings.h"
#include "kiln/backend.h"

// Outside namespace kiln, so that Cell's error messages count a Python
// subclass as the user's own cell rather than one of the library's.
namespace kiln_python {

using kiln::Tensor;
using kiln::nn::Cell;

// The C++ face of a Cell subclass written in Python: construct() calls the
// Python method (taking the GIL, so C++ training loops can call it).
class PyCell : public Cell {
 public:
  Tensor construct(const Tensor& x) override { PYBIND11_OVERRIDE_PURE(Tensor, Cell, construct, x); }
  std::string type_name() const override { return python_type_.empty() ? "Cell" : python_type_; }
  std::string extra_repr() const override { PYBIND11_OVERRIDE(std::string, Cell, extra_repr, ); }
  void set_python_type(std::string name) { python_type_ = std::move(name); }
  using Cell::add_child;

 private:
  std::string python_type_;
};

class PyLossCell : public kiln::nn::LossCell {
 public:
  Tensor construct(const Tensor& outputs, const Tensor& targets) override {
    PYBIND11_OVERRIDE_PURE(Tensor, kiln::nn::LossCell, construct, outputs, targets);
  }
};

}  // namespace kiln_python

namespace kiln::python {
namespace {

using kiln_python::PyCell;
using CellClass = py::class_<nn::Cell, PyCell, std::shared_ptr<nn::Cell>>;

template <typename T>
using Layer = py::class_<T, nn::Cell, std::shared_ptr<T>>;

py::list named(const std::vector<std::pair<std::string, Tensor>>& items) {
  py::list out;
  for (const auto& [name, t] : items) out.append(py::make_tuple(name, t));
  return out;
}

// kiln.jit's dynamic=: (input, axis) pairs, or dicts with input, axis and
// optionally buckets, pad_value and outputs ([(output, axis), ...]).
std::vector<jit::DynamicAxis> dynamic_axes(const py::object& spec) {
  std::vector<jit::DynamicAxis> axes;
  if (spec.is_none()) return axes;
  const char* form = "dynamic= takes a list of (input, axis) pairs or dicts such as "
                     "{'input': 0, 'axis': 1, 'buckets': [32, 64, 128]}";
  if (!py::isinstance<py::list>(spec) && !py::isinstance<py::tuple>(spec)) throw py::type_error(form);
  for (py::handle item : spec) {
    jit::DynamicAxis a;
    if (py::isinstance<py::dict>(item)) {
      for (auto [key, value] : item.cast<py::dict>()) {
        const std::string k = py::str(key);
        if (k == "input") a.input = value.cast<int>();
        else if (k == "axis") a.axis = value.cast<int>();
        else if (k == "buckets") a.buckets = value.cast<std::vector<int64_t>>();
        else if (k == "pad_value") a.pad_value = value.cast<double>();
        else if (k == "outputs") a.outputs = value.cast<std::vector<std::pair<int, int>>>();
        else throw py::value_error("dynamic=: unknown key '" + k + "'; the keys are input, axis, buckets, pad_value and outputs");
      }
    } else if ((py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) && py::len(item) == 2) {
      std::tie(a.input, a.axis) = item.cast<std::pair<int, int>>();
    } else {
      throw py::type_error(std::string(form) + "; got " + std::string(py::repr(item)));
    }
    axes.push_back(std::move(a));
  }
  return axes;
}

}  // namespace

void bind_nn(py::module_& m) {
  CellClass cell(m, "Cell", "The C++ side of kiln.nn.Cell; subclass kiln.nn.Cell instead.");
  cell.def(py::init<>())
      .def("construct", &nn::Cell::construct)
      .def("_call", [](nn::Cell& c, const Tensor& x) { return c(x); })
      .def("_set_python_type", [](nn::Cell& c, std::string name) {
        if (auto* p = dynamic_cast<PyCell*>(&c)) p->set_python_type(std::move(name));
      })
      .def("_register_parameter", &nn::Cell::register_parameter, py::arg("name"), py::arg("value"),
           py::arg("trainable") = true)
      .def("_register_buffer", &nn::Cell::register_buffer, py::arg("name"), py::arg("value"))
      .def("_register_cell", [](nn::Cell& c, const std::string& name, std::shared_ptr<nn::Cell> child) {
        auto* p = dynamic_cast<PyCell*>(&c);
        KILN_CHECK(p != nullptr, "child cells can only be added to cells defined in Python");
        p->add_child(name, std::move(child));
      }, py::keep_alive<1, 3>())
      .def("set_train", [](nn::Cell& c, bool mode) { c.set_train(mode); return &c; }, py::arg("mode") = true,
           py::return_value_policy::reference)
      .def("to_float", [](nn::Cell& c, DType dtype) { return &c.to_float(dtype); }, py::arg("dst_type"),
           py::return_value_policy::reference,
           "Computes this cell (and the cells it calls that set none of their own) in dst_type, e.g. kiln.float16: "
           "its floating inputs and every op's, parameters included, are cast to it; the parameters stay float32 and "
           "train through the casts. Returns the cell.")
      .def_property_readonly("compute_dtype", &nn::Cell::compute_dtype)
      .def("set_autocast", [](nn::Cell& c, std::optional<DType> dtype) { return &c.set_autocast(dtype); },
           py::arg("dtype"), py::return_value_policy::reference,
           "Computes this cell under autocast in dtype (kiln.bfloat16 or kiln.float16; None: off): matrix products "
           "and convolutions in it, reductions, softmax, normalizations and losses in float32. Returns the cell.")
      .def_property_readonly("autocast", &nn::Cell::autocast)
      .def_property_readonly("training", &nn::Cell::training)
      .def("parameters_and_names", [](const nn::Cell& c) { return named(c.parameters_and_names()); },
           "(name, parameter) pairs with hierarchical names such as 'fc1.weight'.")
      .def("buffers_and_names", [](const nn::Cell& c) { return named(c.buffers_and_names()); })
      .def("trainable_params", &nn::Cell::trainable_params, "The parameters that require gradients.")
      .def("get_parameters", [](const nn::Cell& c) {
        std::vector<Tensor> out;
        for (auto& [n, t] : c.parameters_and_names()) out.push_back(t);
        return out;
      })
      .def("parameter_count", &nn::Cell::parameter_count, py::arg("trainable_only") = false)
      .def("freeze", &nn::Cell::freeze, py::arg("prefix") = "", py::arg("frozen") = true)
      .def("cells_and_names", [](nn::Cell& c) {
        py::list out;
        std::function<void(const std::string&, const nn::Cell&)> walk;
        walk = [&](const std::string& prefix, const nn::Cell& cell) {
          for (auto& [name, child] : cell.children()) {
            std::string path = prefix.empty() ? name : prefix + "." + name;
            out.append(py::make_tuple(path, child));
            walk(path, *child);
          }
        };
        walk("", c);
        return out;
      })
      .def("name_cells", [](nn::Cell& c) {
        py::dict out;
        for (auto& [name, child] : c.children()) out[py::str(name)] = child;
        return out;
      })
      .def("to", [](nn::Cell& c, const std::string& device) { c.to(parse_device(device)); return &c; },
           py::return_value_policy::reference)
      .def("summary", &nn::Cell::summary)
      .def("type_name", &nn::Cell::type_name)
      .def("extra_repr", &nn::Cell::extra_repr);

  Layer<nn::Dense>(m, "Dense")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_channels"), py::arg("out_channels"), py::arg("has_bias") = true)
      .def("_set_activation", &nn::Dense::set_activation, py::arg("activation"), py::keep_alive<1, 2>())
      .def_readwrite("weight", &nn::Dense::weight)
      .def_readwrite("bias", &nn::Dense::bias);
  Layer<nn::Conv2d>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t dilation,
                       int64_t group, bool has_bias) {
             return std::make_shared<nn::Conv2d>(in, out, k, nn::Conv2dOptions{stride, padding, dilation, group, has_bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("group") = 1, py::arg("has_bias") = true)
      .def_readwrite("weight", &nn::Conv2d::weight)
      .def_readwrite("bias", &nn::Conv2d::bias);
  Layer<nn::Conv1d>(m, "Conv1d")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t dilation,
                       int64_t group, bool has_bias) {
             return std::make_shared<nn::Conv1d>(in, out, k, nn::Conv2dOptions{stride, padding, dilation, group, has_bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("group") = 1, py::arg("has_bias") = true)
      .def_readwrite("weight", &nn::Conv1d::weight)
      .def_readwrite("bias", &nn::Conv1d::bias);
  Layer<nn::Conv2dTranspose>(m, "Conv2dTranspose")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, int64_t output_padding,
                       int64_t dilation, int64_t group, bool has_bias) {
             return std::make_shared<nn::Conv2dTranspose>(
                 in, out, k, nn::ConvTransposeOptions{stride, padding, output_padding, dilation, group, has_bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("dilation") = 1, py::arg("group") = 1,
           py::arg("has_bias") = true)
      .def_readwrite("weight", &nn::Conv2dTranspose::weight)
      .def_readwrite("bias", &nn::Conv2dTranspose::bias);
  Layer<nn::BatchNorm2d>(m, "BatchNorm2d")
      .def(py::init<int64_t, double, double>(), py::arg("num_features"), py::arg("momentum") = 0.1, py::arg("eps") = 1e-5)
      .def_readwrite("weight", &nn::BatchNorm2d::weight)
      .def_readwrite("bias", &nn::BatchNorm2d::bias)
      .def_readwrite("running_mean", &nn::BatchNorm2d::running_mean)
      .def_readwrite("running_var", &nn::BatchNorm2d::running_var);
  Layer<nn::BatchNorm1d>(m, "BatchNorm1d")
      .def(py::init<int64_t, double, double>(), py::arg("num_features"), py::arg("momentum") = 0.1, py::arg("eps") = 1e-5)
      .def_readwrite("weight", &nn::BatchNorm1d::weight)
      .def_readwrite("bias", &nn::BatchNorm1d::bias);
  Layer<nn::LayerNorm>(m, "LayerNorm")
      .def(py::init([](py::object shape, double eps, bool affine) {
             return std::make_shared<nn::LayerNorm>(shape_of(shape), eps, affine);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("affine") = true)
      .def_readwrite("weight", &nn::LayerNorm::weight)
      .def_readwrite("bias", &nn::LayerNorm::bias);
  Layer<nn::GroupNorm>(m, "GroupNorm")
      .def(py::init<int64_t, int64_t, double>(), py::arg("num_groups"), py::arg("num_channels"), py::arg("eps") = 1e-5)
      .def_readwrite("weight", &nn::GroupNorm::weight)
      .def_readwrite("bias", &nn::GroupNorm::bias);
  Layer<nn::ReLU>(m, "ReLU").def(py::init<>());
  Layer<nn::SiLU>(m, "SiLU").def(py::init<>());
  Layer<nn::Sigmoid>(m, "Sigmoid").def(py::init<>());
  Layer<nn::Tanh>(m, "Tanh").def(py::init<>());
  Layer<nn::Flatten>(m, "Flatten").def(py::init<>());
  Layer<nn::LeakyReLU>(m, "LeakyReLU").def(py::init<double>(), py::arg("alpha") = 0.01);
  Layer<nn::GELU>(m, "GELU").def(py::init<bool>(), py::arg("approximate") = false);
  Layer<nn::Softmax>(m, "Softmax").def(py::init<int64_t>(), py::arg("axis") = -1);
  Layer<nn::LogSoftmax>(m, "LogSoftmax").def(py::init<int64_t>(), py::arg("axis") = -1);
  Layer<nn::Dropout>(m, "Dropout").def(py::init<double>(), py::arg("p") = 0.5);
  Layer<nn::MaxPool2d>(m, "MaxPool2d")
      .def(py::init<int64_t, int64_t, int64_t, bool>(), py::arg("kernel_size"), py::arg("stride") = 0,
           py::arg("padding") = 0, py::arg("ceil_mode") = false);
  Layer<nn::AvgPool2d>(m, "AvgPool2d")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("kernel_size"), py::arg("stride") = 0, py::arg("padding") = 0);
  Layer<nn::AdaptiveAvgPool2d>(m, "AdaptiveAvgPool2d").def(py::init<int64_t>(), py::arg("output_size"));
  Layer<nn::Upsample>(m, "Upsample")
      .def(py::init<double, std::string, bool>(), py::arg("scale_factor"), py::arg("mode") = "nearest",
           py::arg("align_corners") = false);
  Layer<nn::Embedding>(m, "Embedding")
      .def(py::init<int64_t, int64_t, int64_t>(), py::arg("vocab_size"), py::arg("embedding_size"),
           py::arg("padding_idx") = -1)
      .def_readwrite("weight", &nn::Embedding::weight);
  Layer<nn::SequentialCell>(m, "SequentialCell")
      .def(py::init<std::vector<nn::CellPtr>>(), py::arg("cells"))
      .def("append", &nn::SequentialCell::append, py::keep_alive<1, 2>())
      .def("__len__", [](const nn::SequentialCell& s) { return s.children().size(); })
      .def("__getitem__", [](const nn::SequentialCell& s, int64_t i) {
        int64_t n = static_cast<int64_t>(s.children().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("SequentialCell index out of range");
        return s.children()[i].second;
      });
  Layer<nn::CellList>(m, "CellList")
      .def(py::init<std::vector<nn::CellPtr>>(), py::arg("cells") = std::vector<nn::CellPtr>{})
      .def("append", &nn::CellList::append, py::keep_alive<1, 2>())
      .def("__len__", &nn::CellList::size)
      .def("__getitem__", [](const nn::CellList& s, int64_t i) {
        int64_t n = static_cast<int64_t>(s.children().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("CellList index out of range");
        return s.children()[i].second;
      });

  auto recurrent = Layer<nn::RecurrentLayer>(m, "RecurrentLayer");
  recurrent.def("forward", [](nn::RecurrentLayer& l, const Tensor& x, std::optional<Tensor> h0, std::optional<Tensor> c0) {
    auto r = l.forward(x, h0.value_or(Tensor()), c0.value_or(Tensor()));
    if (r.c_n.defined()) return py::make_tuple(r.output, py::make_tuple(r.h_n, r.c_n));
    return py::make_tuple(r.output, r.h_n);
  }, py::arg("x"), py::arg("h0") = py::none(), py::arg("c0") = py::none(),
            "(output, h_n) for GRU and RNN, (output, (h_n, c_n)) for LSTM, as PyTorch returns them.");
  auto recurrent_options = [](int64_t layers, bool bias, bool batch_first, double dropout, bool bidirectional,
                              std::string nonlinearity) {
    nn::RecurrentOptions o;
    o.num_layers = layers, o.bias = bias, o.batch_first = batch_first, o.dropout = dropout;
    o.bidirectional = bidirectional, o.nonlinearity = std::move(nonlinearity);
    return o;
  };
#define KILN_RECURRENT(NAME)                                                                                        \
  py::class_<nn::NAME, nn::RecurrentLayer, std::shared_ptr<nn::NAME>>(m, #NAME)                                     \
      .def(py::init([recurrent_options](int64_t in, int64_t hidden, int64_t layers, bool bias, bool batch_first,    \
                                        double dropout, bool bidirectional, std::string nonlinearity) {             \
             return std::make_shared<nn::NAME>(                                                                     \
                 in, hidden, recurrent_options(layers, bias, batch_first, dropout, bidirectional, nonlinearity));   \
           }),                                                                                                      \
           py::arg("input_size"), py::arg("hidden_size"), py::arg("num_layers") = 1, py::arg("has_bias") = true,    \
           py::arg("batch_first") = false, py::arg("dropout") = 0.0, py::arg("bidirectional") = false,              \
           py::arg("nonlinearity") = "tanh")
  KILN_RECURRENT(LSTM);
  KILN_RECURRENT(GRU);
  KILN_RECURRENT(RNN);
#undef KILN_RECURRENT

  Layer<nn::MultiheadAttention>(m, "MultiheadAttention")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("embed_dim"), py::arg("num_heads"), py::arg("has_bias") = true)
      .def("forward", [](nn::MultiheadAttention& a, const Tensor& q, const Tensor& k, const Tensor& v,
                         std::optional<Tensor> attn_mask, std::optional<Tensor> key_padding_mask, bool causal) {
        nn::AttentionMasks masks{attn_mask.value_or(Tensor()), key_padding_mask.value_or(Tensor()), causal};
        return a.forward(q, k, v, masks);
      }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
           py::arg("key_padding_mask") = py::none(), py::arg("causal") = false);
  Layer<nn::TransformerEncoderLayer>(m, "TransformerEncoderLayer")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout, std::string activation,
                       bool norm_first, double eps) {
             nn::TransformerEncoderOptions o;
             o.dim_feedforward = dim_feedforward, o.dropout = dropout, o.gelu = activation == "gelu";
             o.norm_first = norm_first, o.layer_norm_eps = eps;
             KILN_CHECK(activation == "gelu" || activation == "relu", "activation must be 'relu' or 'gelu', not '",
                        activation, "'");
             return std::make_shared<nn::TransformerEncoderLayer>(d_model, nhead, o);
           }),
           py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1,
           py::arg("activation") = "relu", py::arg("norm_first") = false, py::arg("layer_norm_eps") = 1e-5)
      .def("forward", [](nn::TransformerEncoderLayer& l, const Tensor& x, std::optional<Tensor> attn_mask,
                         std::optional<Tensor> key_padding_mask, bool causal) {
        return l.forward(x, {attn_mask.value_or(Tensor()), key_padding_mask.value_or(Tensor()), causal});
      }, py::arg("x"), py::arg("attn_mask") = py::none(), py::arg("key_padding_mask") = py::none(),
           py::arg("causal") = false);

  m.def(
      "make_model",
      [](const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size) {
        models::ModelConfig c = models::default_config(name);
        c.num_classes = num_classes, c.in_channels = in_channels, c.image_size = image_size;
        return models::make_model(name, c);
      },
      py::arg("name"), py::arg("num_classes") = 10, py::arg("in_channels") = 1, py::arg("image_size") = 28,
      "A network of the model zoo: mlp, cnn, resnet8, resnet18, resnet50, char_transformer, gpt2.");

  // --- losses -------------------------------------------------------------------
  py::class_<nn::LossCell, kiln_python::PyLossCell, std::shared_ptr<nn::LossCell>>(m, "LossCell")
      .def(py::init<>())
      .def("construct", &nn::LossCell::construct)
      .def("__call__", [](nn::LossCell& l, const Tensor& out, const Tensor& y) { return l(out, y); })
      .def("to_float", [](nn::LossCell& l, DType dtype) { return &l.to_float(dtype); }, py::arg("dst_type"),
           py::return_value_policy::reference, "Computes the loss in dst_type (e.g. kiln.float32 after a float16 "
           "network). Returns the loss cell.")
      .def_property_readonly("compute_dtype", &nn::LossCell::compute_dtype);
  py::class_<nn::CrossEntropyLoss, nn::LossCell, std::shared_ptr<nn::CrossEntropyLoss>>(m, "CrossEntropyLoss")
      .def(py::init([](std::optional<Tensor> weight, int64_t ignore_index, std::string reduction, double label_smoothing) {
             CrossEntropyOptions o;
             o.weight = weight.value_or(Tensor()), o.ignore_index = ignore_index, o.reduction = std::move(reduction);
             o.label_smoothing = label_smoothing;
             return std::make_shared<nn::CrossEntropyLoss>(o);
           }),
           py::arg("weight") = py::none(), py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
           py::arg("label_smoothing") = 0.0);
  py::class_<nn::NLLLoss, nn::LossCell, std::shared_ptr<nn::NLLLoss>>(m, "NLLLoss")
      .def(py::init([](std::optional<Tensor> weight, int64_t ignore_index, std::string reduction) {
             CrossEntropyOptions o;
             o.weight = weight.value_or(Tensor()), o.ignore_index = ignore_index, o.reduction = std::move(reduction);
             return std::make_shared<nn::NLLLoss>(o);
           }),
           py::arg("weight") = py::none(), py::arg("ignore_index") = -100, py::arg("reduction") = "mean");
  py::class_<nn::MSELoss, nn::LossCell, std::shared_ptr<nn::MSELoss>>(m, "MSELoss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::L1Loss, nn::LossCell, std::shared_ptr<nn::L1Loss>>(m, "L1Loss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::SmoothL1Loss, nn::LossCell, std::shared_ptr<nn::SmoothL1Loss>>(m, "SmoothL1Loss")
      .def(py::init<double, std::string>(), py::arg("beta") = 1.0, py::arg("reduction") = "mean");
  py::class_<nn::BCEWithLogitsLoss, nn::LossCell, std::shared_ptr<nn::BCEWithLogitsLoss>>(m, "BCEWithLogitsLoss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");

  // --- initialisers (in place) ----------------------------------------------------
  auto init = m.def_submodule("init", "Initialisers: fill a tensor in place, recording no gradient.");
  init.def("uniform", [](Tensor t, double a, double b) { nn::init::uniform(t, a, b); }, py::arg("tensor"), py::arg("low"), py::arg("high"));
  init.def("normal", [](Tensor t, double mean, double std) { nn::init::normal(t, mean, std); }, py::arg("tensor"),
           py::arg("mean") = 0.0, py::arg("std") = 1.0);
  init.def("constant", [](Tensor t, double v) { nn::init::constant(t, v); }, py::arg("tensor"), py::arg("value"));
  init.def("zeros", [](Tensor t) { nn::init::zeros(t); }, py::arg("tensor"));
  init.def("ones", [](Tensor t) { nn::init::ones(t); }, py::arg("tensor"));
  init.def("xavier_uniform", [](Tensor t, double gain) { nn::init::xavier_uniform(t, gain); }, py::arg("tensor"),
           py::arg("gain") = 1.0);
  init.def("he_normal", [](Tensor t) { nn::init::he_normal(t); }, py::arg("tensor"));
  init.def("fans", [](const Tensor& t) { return nn::init::fans(t); }, py::arg("weight"));

  // --- graph mode -----------------------------------------------------------------
  m.def("set_mode", [](const std::string& mode) {
    KILN_CHECK(mode == "graph" || mode == "eager", "mode is 'graph' or 'eager', not '", mode, "'");
    set_context({mode == "graph" ? Mode::Graph : Mode::Eager});
  });
  m.def("get_mode", [] { return std::string(context().mode == Mode::Graph ? "graph" : "eager"); });
  // A device's canonical name, once this build is known to have its backend
  // (else the error says which it has and how to get CUDA's).
  m.def("checked_device", [](const std::string& name) {
    const Device d = parse_device(name);
    backend(d.type);
    return d.str();
  });
  py::class_<jit::CompiledFunction>(m, "CompiledFunction")
      .def("__call__", [](jit::CompiledFunction& f, std::vector<Tensor> inputs) { return f(inputs); })
      .def_property_readonly("graph", &jit::CompiledFunction::graph_text)
      .def_property_readonly("compiles", &jit::CompiledFunction::compiles)
      .def_property_readonly("report", [](const jit::CompiledFunction& f) { return f.report().str(); });
  m.def("compile_cell", [](std::shared_ptr<nn::Cell> cell, std::vector<Tensor> examples, bool inference,
                           py::object dynamic) {
    jit::CompileOptions o;
    o.inference = inference;
    o.dynamic = dynamic_axes(dynamic);
    return jit::compile(std::move(cell), examples, o);
  }, py::arg("cell"), py::arg("example_inputs"), py::arg("inference") = false, py::arg("dynamic") = py::none(),
        py::keep_alive<0, 1>());
  m.def("compile_function", [](py::function fn, std::vector<Tensor> examples, std::string name, py::object dynamic) {
    jit::CompileOptions o;
    o.name = std::move(name);
    o.dynamic = dynamic_axes(dynamic);
    jit::Function f = [fn](const std::vector<Tensor>& inputs) {
      py::gil_scoped_acquire gil;
      py::object r = fn(*py::cast(inputs));
      if (py::isinstance<Tensor>(r)) return std::vector<Tensor>{py::cast<Tensor>(r)};
      return py::cast<std::vector<Tensor>>(r);
    };
    return jit::compile(f, examples, o);
  }, py::arg("fn"), py::arg("example_inputs"), py::arg("name") = "function", py::arg("dynamic") = py::none());
}

}  // namespace kiln::python

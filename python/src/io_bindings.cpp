// Checkpoints, PyTorch weight import, ONNX export, the inference runtime and
// the OIP server.
#include "bindings.h"
#include "kiln/migrate.h"
#include "kiln/nn/quantize_aware.h"
#include "kiln/quantize.h"

#ifdef KILN_WITH_SERVE
#include "kiln/serve.h"
#endif

namespace kiln::python {
namespace {

py::list pairs(const io::NamedTensors& tensors) {
  py::list out;
  for (const auto& [name, t] : tensors) out.append(py::make_tuple(name, t));
  return out;
}

io::NamedTensors named_of(py::handle items) {
  io::NamedTensors out;
  if (py::isinstance<py::dict>(items)) {
    for (auto [k, v] : py::reinterpret_borrow<py::dict>(items)) out.emplace_back(py::cast<std::string>(k), to_tensor(v));
  } else {
    for (auto item : items) {
      auto pair = py::reinterpret_borrow<py::sequence>(item);
      out.emplace_back(py::cast<std::string>(pair[0]), to_tensor(pair[1]));
    }
  }
  return out;
}

// Copies named tensors into a cell's parameters and buffers of those names.
void assign_by_name(nn::Cell& cell, const io::NamedTensors& tensors) {
  std::map<std::string, Tensor> targets;
  for (auto& [n, t] : cell.parameters_and_names()) targets[n] = t;
  for (auto& [n, t] : cell.buffers_and_names()) targets[n] = t;
  NoGradGuard guard;
  for (const auto& [name, value] : tensors) {
    auto it = targets.find(name);
    KILN_CHECK(it != targets.end(), "no parameter or buffer named '", name, "' in the network");
    const bool mindspore_form = io::mindspore_layout_differs(value.shape(), it->second.shape());
    KILN_CHECK(it->second.shape() == value.shape() || mindspore_form, "'", name, "' is ",
               shape_str(it->second.shape()), " in the network but ", shape_str(value.shape()), " in the weights");
    it->second.copy_(mindspore_form ? value.reshape(it->second.shape()) : value);
  }
}

}  // namespace

void bind_io(py::module_& m) {
  py::class_<io::LoadReport>(m, "LoadReport")
      .def_readonly("loaded", &io::LoadReport::loaded)
      .def_readonly("missing", &io::LoadReport::missing)
      .def_readonly("unexpected", &io::LoadReport::unexpected)
      .def_readonly("shape_mismatches", &io::LoadReport::shape_mismatches)
      .def_readonly("converted", &io::LoadReport::converted)
      .def("clean", &io::LoadReport::clean)
      .def("__str__", &io::LoadReport::str)
      .def("__repr__", [](const io::LoadReport& r) {
        return "<LoadReport " + std::to_string(r.loaded.size()) + " loaded, " + std::to_string(r.missing.size()) +
               " missing, " + std::to_string(r.unexpected.size()) + " unexpected>";
      });
  m.def("save_cell", [](const nn::Cell& cell, const std::string& path, std::map<std::string, std::string> metadata) {
    py::gil_scoped_release release;
    io::save_cell(cell, path, metadata);
  }, py::arg("cell"), py::arg("path"), py::arg("metadata") = std::map<std::string, std::string>{});
  m.def("save_tensors", [](py::object items, const std::string& path, std::map<std::string, std::string> metadata) {
    io::NamedTensors tensors = named_of(items);
    py::gil_scoped_release release;
    io::save_safetensors(path, tensors, metadata);
  }, py::arg("tensors"), py::arg("path"), py::arg("metadata") = std::map<std::string, std::string>{});
  m.def("load_tensors", [](const std::string& path) {
    io::NamedTensors tensors;
    {
      py::gil_scoped_release release;
      tensors = io::load_tensor_file(path);
    }
    return pairs(tensors);
  }, py::arg("path"), "(name, tensor) pairs of a safetensors or torch.save file.");
  m.def("load_into", [](nn::Cell& cell, const std::string& path, bool strict, bool print_report) {
    py::gil_scoped_release release;
    return io::load_checkpoint(cell, path, io::LoadOptions{strict, print_report});
  }, py::arg("cell"), py::arg("path"), py::arg("strict") = true, py::arg("print_report") = true);
  m.def("assign_by_name", [](nn::Cell& cell, py::object items) { assign_by_name(cell, named_of(items)); });
  m.def("save_mindspore_checkpoint", [](py::object obj, const std::string& path, std::map<std::string, std::string> strings) {
    io::NamedTensors tensors;
    if (py::isinstance<nn::Cell>(obj)) {
      const auto& cell = py::cast<const nn::Cell&>(obj);
      tensors = cell.parameters_and_names();
      for (auto& b : cell.buffers_and_names()) tensors.push_back(b);
    } else {
      tensors = named_of(obj);
    }
    py::gil_scoped_release release;
    io::save_mindspore_checkpoint(path, tensors, strings);
  }, py::arg("obj"), py::arg("path"), py::arg("strings") = std::map<std::string, std::string>{});
  // Each of MindSpore's names as the cell's own ("bn.gamma" -> "bn.weight"), or
  // "" for optimizer state.
  m.def("kiln_names_for_mindspore", [](const nn::Cell& cell, const std::vector<std::string>& names) {
    const auto targets = io::infos_of(cell);
    std::vector<std::string> out;
    for (const auto& n : names)
      out.push_back(io::is_mindspore_optimizer_state(n) ? "" : io::kiln_name_for_mindspore(n, targets));
    return out;
  });

  py::class_<io::MatchResult>(m, "MatchResult")
      .def_property_readonly("matched", [](const io::MatchResult& r) {
        py::list out;
        for (auto& x : r.matched) out.append(py::make_tuple(x.source, x.target, x.how, x.transpose));
        return out;
      })
      .def_property_readonly("unmatched_source", [](const io::MatchResult& r) {
        std::vector<std::string> n;
        for (auto& x : r.unmatched_source) n.push_back(x.name);
        return n;
      })
      .def_property_readonly("unmatched_target", [](const io::MatchResult& r) {
        std::vector<std::string> n;
        for (auto& x : r.unmatched_target) n.push_back(x.name);
        return n;
      })
      .def_readonly("ignored", &io::MatchResult::ignored)
      .def_readonly("suggestions", &io::MatchResult::suggestions)
      .def("complete", &io::MatchResult::complete);
  m.def("import_weights", [](nn::Cell& cell, const std::string& path, const std::string& rules_path, bool strict,
                             bool dry_run) {
    io::NamedTensors tensors = io::load_tensor_file(path);
    auto source = io::infos_of(tensors);
    auto target = io::infos_of(cell);
    auto match = io::match_names(source, target, rules_path.empty() ? io::RenameRules{} : io::load_rename_rules(rules_path));
    std::string table = io::format_matches(match, source, target);
    if (dry_run) return py::make_tuple(match, table);  // the mapping only: nothing is loaded
    KILN_CHECK(match.complete() || !strict, "the weights in ", path, " do not all match the network; nothing was loaded:\n",
               table, "\nadd rename rules (rules=...) or pass strict=False to load what matched");
    assign_by_name(cell, io::apply_matches(match, tensors, target));
    return py::make_tuple(match, table);
  }, py::arg("cell"), py::arg("path"), py::arg("rules") = "", py::arg("strict") = true, py::arg("dry_run") = false);

  py::class_<ExportReport>(m, "ExportReport")
      .def_readonly("nodes", &ExportReport::nodes)
      .def_readonly("initializers", &ExportReport::initializers)
      .def_readonly("weight_bytes", &ExportReport::weight_bytes)
      .def_readonly("op_counts", &ExportReport::op_counts)
      .def("__str__", &ExportReport::str);
  m.def("export_onnx", [](std::shared_ptr<nn::Cell> cell, std::vector<Tensor> inputs, const std::string& path,
                          bool dynamic_batch, std::vector<std::string> input_names, std::vector<std::string> output_names,
                          int opset) {
    ExportOptions o;
    o.dynamic_batch = dynamic_batch, o.input_names = std::move(input_names), o.output_names = std::move(output_names);
    o.opset = opset;
    return export_model(cell, inputs, path, o);
  }, py::arg("cell"), py::arg("inputs"), py::arg("path"), py::arg("dynamic_batch") = false,
        py::arg("input_names") = std::vector<std::string>{}, py::arg("output_names") = std::vector<std::string>{},
        py::arg("opset") = 17);

  py::class_<TensorInfo>(m, "TensorInfo")
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("dtype", &TensorInfo::dtype)
      .def_readonly("shape", &TensorInfo::shape)
      .def("accepts", &TensorInfo::accepts, py::arg("tensor"),
           "Whether the tensor has this input's dtype and, where the model says, its shape")
      .def("__repr__", &TensorInfo::str);
  py::class_<InferenceSession, std::shared_ptr<InferenceSession>>(m, "InferenceSession")
      .def(py::init([](const std::string& path, const std::string& device, int threads, int optimization_level,
                       const std::string& precision) {
             SessionOptions o;
             o.device = device, o.threads = threads, o.optimization_level = optimization_level;
             o.precision = precision;
             py::gil_scoped_release release;
             return std::make_shared<InferenceSession>(path, o);
           }),
           py::arg("path"), py::arg("device") = "cpu", py::arg("threads") = 0, py::arg("optimization_level") = 2,
           py::arg("precision") = "float32")
      .def(
          "run",
          [](InferenceSession& s, py::object inputs) -> py::object {
            if (py::isinstance<py::dict>(inputs)) {
              std::map<std::string, Tensor> feed;
              for (auto [k, v] : py::reinterpret_borrow<py::dict>(inputs))
                feed[py::cast<std::string>(k)] = to_tensor(v);
              std::map<std::string, Tensor> out;
              {
                py::gil_scoped_release release;
                out = s.run(feed);
              }
              return py::cast(out);
            }
            std::vector<Tensor> feed;
            if (py::isinstance<py::list>(inputs) || py::isinstance<py::tuple>(inputs)) {
              for (auto v : inputs) feed.push_back(to_tensor(v));
            } else {
              feed.push_back(to_tensor(inputs));
            }
            std::vector<Tensor> out;
            {
              py::gil_scoped_release release;
              out = s.run(feed);
            }
            return py::cast(out);
          },
          py::arg("inputs"),
          "Runs the model: a list of inputs in the model's order (or one input) gives a list of "
          "outputs; a dict by input name gives a dict by output name.")
      .def_property_readonly("inputs", &InferenceSession::inputs)
      .def_property_readonly("outputs", &InferenceSession::outputs)
      .def_property_readonly("metadata", &InferenceSession::metadata)
      .def_property_readonly("opset", &InferenceSession::opset)
      .def_property_readonly("producer", &InferenceSession::producer);
  m.def("supported_onnx_ops", &supported_onnx_ops);

  py::class_<QuantizedLayer>(m, "QuantizedLayer")
      .def_readonly("name", &QuantizedLayer::name)
      .def_readonly("op", &QuantizedLayer::op)
      .def_readonly("relative_error", &QuantizedLayer::relative_error)
      .def_readonly("kept_float", &QuantizedLayer::kept_float);
  py::class_<QuantizedOutput>(m, "QuantizedOutput")
      .def_readonly("name", &QuantizedOutput::name)
      .def_readonly("relative_error", &QuantizedOutput::relative_error)
      .def_readonly("max_abs_error", &QuantizedOutput::max_abs_error)
      .def_readonly("top1_agreement", &QuantizedOutput::top1_agreement);
  py::class_<QuantizeReport>(m, "QuantizeReport")
      .def_readonly("method", &QuantizeReport::method)
      .def_readonly("calibration_batches", &QuantizeReport::calibration_batches)
      .def_readonly("held_out_batches", &QuantizeReport::held_out_batches)
      .def_readonly("layers", &QuantizeReport::layers)
      .def_readonly("outputs", &QuantizeReport::outputs)
      .def_property_readonly("quantized", &QuantizeReport::quantized)
      .def("__str__", &QuantizeReport::str);
  m.def("quantize_model", [](py::bytes model, const std::string& out, std::vector<std::vector<Tensor>> batches,
                             const std::string& method,
                             double percentile, const std::string& activations, bool reduce_range,
                             std::vector<std::string> keep, int keep_sensitive, double held_out) {
    QuantizeOptions o;
    o.method = method, o.percentile = percentile, o.reduce_range = reduce_range, o.keep_float = std::move(keep);
    o.keep_sensitive = keep_sensitive, o.held_out = held_out;
    o.activations = dtype_from_name(activations);
    std::string bytes = model;
    QuantizeResult r;
    {
      py::gil_scoped_release release;
      r = quantize_model(bytes, batches, o);
      r.save(out);
    }
    return r.report;
  });
  m.def("quantize_aware", [](std::shared_ptr<nn::Cell> cell, const std::string& activations, bool reduce_range) {
    nn::QuantizeAwareOptions o;
    o.activations = dtype_from_name(activations), o.reduce_range = reduce_range;
    return nn::quantize_aware(*cell, o);
  }, py::arg("cell"), py::arg("activations") = "uint8", py::arg("reduce_range") = false);
  m.def("set_fake_quantization", [](std::shared_ptr<nn::Cell> cell, bool enabled) {
    nn::set_fake_quantization(*cell, enabled);
  });

#ifdef KILN_WITH_SERVE
  py::class_<Server, std::shared_ptr<Server>>(m, "Server")
      .def(py::init([](const std::string& model, const std::string& repository, const std::string& host, int port,
                       const std::string& access_log) {
             ServeOptions o;
             o.model = model, o.model_repository = repository, o.host = host, o.port = port, o.access_log = access_log;
             return std::make_shared<Server>(o);
           }),
           py::arg("model") = "", py::arg("model_repository") = "", py::arg("host") = "127.0.0.1", py::arg("port") = 0,
           py::arg("access_log") = "")
      .def("start", [](Server& s) {
        py::gil_scoped_release release;
        return s.start();
      }, "Starts listening, loads the models and turns ready; returns the port.")
      .def("shutdown", [](Server& s) {
        py::gil_scoped_release release;
        s.shutdown();
      })
      .def_property_readonly("ready", &Server::ready);
#endif
}

}  // namespace kiln::python

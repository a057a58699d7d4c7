// Optimizers, schedules, metrics, callbacks (written in Python too) and
// train::Model, whose loops run without the GIL.
#include <cmath>

#include "bindings.h"
#include "kiln/run_tracker.h"

namespace kiln_python {

// A callback written in Python; each event takes the GIL.
class PyCallback : public kiln::train::Callback {
 public:
  using Callback::Callback;
  void on_train_begin(kiln::train::Model& m) override {
    PYBIND11_OVERRIDE(void, Callback, on_train_begin, m);
  }
  void on_step_end(kiln::train::Model& m, const kiln::train::StepInfo& s) override {
    PYBIND11_OVERRIDE(void, Callback, on_step_end, m, s);
  }
  void on_epoch_end(kiln::train::Model& m, const kiln::train::EpochInfo& e) override {
    PYBIND11_OVERRIDE(void, Callback, on_epoch_end, m, e);
  }
  void on_train_end(kiln::train::Model& m) override { PYBIND11_OVERRIDE(void, Callback, on_train_end, m); }
};

}  // namespace kiln_python

namespace kiln::python {
namespace {

using train::Model;

// Ctrl-C while train() runs without the GIL: Python's handler only notes
// the signal, so after every step this runs it, and a KeyboardInterrupt
// ends training after that step; train() then raises it.
class InterruptCheck : public train::Callback {
 public:
  void on_step_end(Model& m, const train::StepInfo&) override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      pending_ = std::make_shared<py::error_already_set>();
      m.stop_training();
    }
  }
  void raise_if_interrupted() {
    if (pending_) {
      auto e = std::move(pending_);
      throw *e;
    }
  }

 private:
  std::shared_ptr<py::error_already_set> pending_;
};

std::vector<optim::ParamGroup> groups_of(py::object params, double lr, double weight_decay) {
  std::vector<optim::ParamGroup> groups;
  std::vector<Tensor> plain;
  for (auto item : params) {
    if (py::isinstance<py::dict>(item)) {
      auto d = py::reinterpret_borrow<py::dict>(item);
      KILN_CHECK(d.contains("params"), "a parameter group is a dict with 'params' (and optionally 'lr', 'weight_decay')");
      optim::ParamGroup g;
      g.params = py::cast<std::vector<Tensor>>(d["params"]);
      g.lr = d.contains("lr") ? py::cast<double>(d["lr"]) : lr;
      g.weight_decay = d.contains("weight_decay") ? py::cast<double>(d["weight_decay"]) : weight_decay;
      groups.push_back(std::move(g));
    } else {
      plain.push_back(py::cast<Tensor>(item));
    }
  }
  if (!plain.empty()) groups.insert(groups.begin(), optim::ParamGroup{plain, lr, weight_decay});
  KILN_CHECK(!groups.empty(), "the optimizer got no parameters; pass net.trainable_params()");
  return groups;
}

py::dict epoch_dict(const train::EpochInfo& e) {
  py::dict d;
  d["epoch"] = e.epoch;
  d["loss"] = e.mean_loss;
  d["val_loss"] = e.val_loss;
  d["val_accuracy"] = e.val_accuracy;
  d["seconds"] = e.seconds;
  d["samples_per_s"] = e.samples_per_s;
  d["skipped_steps"] = e.skipped_steps;
  return d;
}

}  // namespace

void bind_train(py::module_& m) {
  // --- optimizers -------------------------------------------------------------------
  py::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(
      m, "Optimizer", "Base of the optimizers: step() applies the parameters' .grad, zero_grad() clears them.")
      .def("step", [](optim::Optimizer& o) { o.step(); }, "Applies one update from the parameters' .grad.")
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_property("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_property_readonly("steps", &optim::Optimizer::steps)
      .def_property_readonly("name", &optim::Optimizer::name)
      .def("state", &optim::Optimizer::state)
      .def("load_state", &optim::Optimizer::load_state);
  py::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD")
      .def(py::init([](py::object params, double lr, double momentum, double weight_decay, bool nesterov) {
             optim::SGDOptions o{lr, momentum, weight_decay, nesterov};
             return std::make_shared<optim::SGD>(groups_of(params, lr, weight_decay), o);
           }),
           py::arg("params"), py::arg("lr"), py::arg("momentum") = 0.0, py::arg("weight_decay") = 0.0,
           py::arg("nesterov") = false);
  py::class_<optim::Adam, optim::Optimizer, std::shared_ptr<optim::Adam>>(m, "Adam")
      .def(py::init([](py::object params, double lr, double beta1, double beta2, double eps, double weight_decay,
                       bool decoupled) {
             optim::AdamOptions o{lr, beta1, beta2, eps, weight_decay, decoupled};
             return std::make_shared<optim::Adam>(groups_of(params, lr, weight_decay), o);
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("beta1") = 0.9, py::arg("beta2") = 0.999,
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0, py::arg("decoupled_weight_decay") = false);
  py::class_<optim::RMSProp, optim::Optimizer, std::shared_ptr<optim::RMSProp>>(m, "RMSProp")
      .def(py::init([](std::vector<Tensor> params, double lr, double alpha, double eps, double weight_decay,
                       double momentum) {
             return std::make_shared<optim::RMSProp>(params, optim::RMSPropOptions{lr, alpha, eps, weight_decay, momentum});
           }),
           py::arg("params"), py::arg("lr") = 0.01, py::arg("alpha") = 0.99, py::arg("eps") = 1e-8,
           py::arg("weight_decay") = 0.0, py::arg("momentum") = 0.0);
  m.def("clip_grad_norm", &optim::clip_grad_norm, py::arg("params"), py::arg("max_norm"));

  auto sched = m.def_submodule("schedules", "Learning rate as a function of the step (from 0).");
  sched.def("cosine", &optim::cosine_schedule, py::arg("base_lr"), py::arg("total"), py::arg("warmup") = 0,
            py::arg("min_lr") = 0.0);
  sched.def("step", &optim::step_schedule, py::arg("base_lr"), py::arg("step_size"), py::arg("gamma") = 0.1);
  sched.def("multistep", &optim::multistep_schedule, py::arg("base_lr"), py::arg("milestones"), py::arg("gamma") = 0.1);
  sched.def("exponential", &optim::exponential_schedule, py::arg("base_lr"), py::arg("gamma"));
  sched.def("polynomial", &optim::polynomial_schedule, py::arg("base_lr"), py::arg("total"), py::arg("power") = 1.0,
            py::arg("end_lr") = 0.0);
  sched.def("piecewise_constant", &optim::piecewise_constant_schedule, py::arg("boundaries"), py::arg("values"));

  // --- metrics ------------------------------------------------------------------------
  py::class_<train::metrics::Metric, std::shared_ptr<train::metrics::Metric>>(m, "Metric")
      .def("reset", &train::metrics::Metric::reset)
      .def("update", &train::metrics::Metric::update)
      .def("results", [](const train::metrics::Metric& x) {
        py::dict d;
        for (auto& [k, v] : x.results()) d[py::str(k)] = v;
        return d;
      });
  py::class_<train::metrics::Accuracy, train::metrics::Metric, std::shared_ptr<train::metrics::Accuracy>>(m, "Accuracy")
      .def(py::init<int64_t>(), py::arg("top_k") = 1);
  py::class_<train::metrics::ClassificationReport, train::metrics::Metric,
             std::shared_ptr<train::metrics::ClassificationReport>>(m, "ClassificationReport")
      .def(py::init<int64_t>(), py::arg("num_classes"))
      .def("confusion_matrix", [](const train::metrics::ClassificationReport& r) {
        auto counts = r.matrix().counts();
        int64_t n = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(counts.size()))));
        std::vector<int64_t> values(counts.begin(), counts.end());
        return to_numpy(from_vector(values, {n, n}));
      });

  // --- callbacks ----------------------------------------------------------------------
  py::class_<train::StepInfo>(m, "StepInfo")
      .def_readonly("epoch", &train::StepInfo::epoch)
      .def_readonly("step", &train::StepInfo::step)
      .def_readonly("batch", &train::StepInfo::batch)
      .def_readonly("batches_per_epoch", &train::StepInfo::batches_per_epoch)
      .def_readonly("batch_size", &train::StepInfo::batch_size)
      .def_readonly("loss", &train::StepInfo::loss)
      .def_readonly("samples_per_s", &train::StepInfo::samples_per_s)
      .def_readonly("loss_scale", &train::StepInfo::loss_scale)
      .def_readonly("update_skipped", &train::StepInfo::update_skipped);
  py::class_<train::EpochInfo>(m, "EpochInfo")
      .def_readonly("epoch", &train::EpochInfo::epoch)
      .def_readonly("epochs", &train::EpochInfo::epochs)
      .def_readonly("loss", &train::EpochInfo::mean_loss)
      .def_readonly("val_loss", &train::EpochInfo::val_loss)
      .def_readonly("val_accuracy", &train::EpochInfo::val_accuracy)
      .def_readonly("seconds", &train::EpochInfo::seconds)
      .def_readonly("samples_per_s", &train::EpochInfo::samples_per_s)
      .def_readonly("skipped_steps", &train::EpochInfo::skipped_steps)
      .def("as_dict", &epoch_dict);
  py::class_<train::Callback, kiln_python::PyCallback, std::shared_ptr<train::Callback>>(m, "Callback")
      .def(py::init<>())
      .def("on_train_begin", &train::Callback::on_train_begin)
      .def("on_step_end", &train::Callback::on_step_end)
      .def("on_epoch_end", &train::Callback::on_epoch_end)
      .def("on_train_end", &train::Callback::on_train_end);
  py::class_<train::LossMonitor, train::Callback, std::shared_ptr<train::LossMonitor>>(m, "LossMonitor")
      .def(py::init<int64_t>(), py::arg("per_print_times") = 100);
  py::class_<train::TimeMonitor, train::Callback, std::shared_ptr<train::TimeMonitor>>(m, "TimeMonitor")
      .def(py::init<>());
  py::class_<train::LearningRateScheduler, train::Callback, std::shared_ptr<train::LearningRateScheduler>>(
      m, "LearningRateScheduler")
      .def(py::init<optim::Schedule, bool>(), py::arg("schedule"), py::arg("per_epoch") = false);
  py::class_<train::ModelCheckpoint, train::Callback, std::shared_ptr<train::ModelCheckpoint>>(m, "ModelCheckpoint")
      .def(py::init<std::string, int, int, std::string, int64_t>(), py::arg("directory"), py::arg("every_epochs") = 1,
           py::arg("keep_last") = 3, py::arg("prefix") = "checkpoint", py::arg("every_steps") = 0)
      .def_property_readonly("kept", [](const train::ModelCheckpoint& c) {
        return std::vector<std::string>(c.kept().begin(), c.kept().end());
      });
  py::class_<train::EarlyStopping, train::Callback, std::shared_ptr<train::EarlyStopping>>(m, "EarlyStopping")
      .def(py::init<std::string, int, double>(), py::arg("monitor") = "val_loss", py::arg("patience") = 3,
           py::arg("min_delta") = 0.0)
      .def_property_readonly("stopped_epoch", &train::EarlyStopping::stopped_epoch);
  py::class_<train::ReduceLROnPlateau, train::Callback, std::shared_ptr<train::ReduceLROnPlateau>>(m, "ReduceLROnPlateau")
      .def(py::init<std::string, double, int, double>(), py::arg("monitor") = "val_loss", py::arg("factor") = 0.1,
           py::arg("patience") = 2, py::arg("min_lr") = 0.0);
  py::class_<train::MetricsLogger, train::Callback, std::shared_ptr<train::MetricsLogger>>(m, "MetricsLogger")
      .def(py::init<std::string, bool>(), py::arg("path"), py::arg("append") = false);
  py::class_<train::RunTracker, train::Callback, std::shared_ptr<train::RunTracker>>(m, "RunTracker")
      .def(py::init<std::string, std::string, int64_t, int64_t>(), py::arg("studio_url"), py::arg("token"),
           py::arg("job_id"), py::arg("every") = 10)
      .def_static("from_environment", &train::RunTracker::from_environment)
      .def("flush", &train::RunTracker::flush, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("points_sent", &train::RunTracker::points_sent);
  py::class_<train::StopAtStep, train::Callback, std::shared_ptr<train::StopAtStep>>(m, "StopAtStep")
      .def(py::init<int64_t>(), py::arg("max_steps"));
  py::class_<train::ProfilerCallback, train::Callback, std::shared_ptr<train::ProfilerCallback>>(m, "ProfilerCallback")
      .def(py::init<std::string, int64_t, int64_t>(), py::arg("directory"), py::arg("steps") = 20, py::arg("skip") = 5);

  // --- Model --------------------------------------------------------------------------
  py::class_<Model, std::shared_ptr<Model>>(m, "Model")
      .def(py::init([](std::shared_ptr<nn::Cell> net, py::object loss, std::shared_ptr<optim::Optimizer> opt,
                       std::vector<std::shared_ptr<train::metrics::Metric>> metrics) {
             if (py::isinstance<nn::LossCell>(loss))
               return std::make_shared<Model>(net, py::cast<std::shared_ptr<nn::LossCell>>(loss), opt, metrics);
             if (!py::isinstance<py::function>(loss) && !py::hasattr(loss, "__call__"))
               throw py::type_error("loss_fn must be a kiln.nn loss or a callable (outputs, labels) -> loss");
             return std::make_shared<Model>(net, py::cast<train::LossFn>(loss), opt, metrics);
           }),
           py::arg("network"), py::arg("loss_fn"), py::arg("optimizer"),
           py::arg("metrics") = std::vector<std::shared_ptr<train::metrics::Metric>>{},
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>(), py::keep_alive<1, 4>())
      .def_static("with_loss_network", [](std::shared_ptr<nn::Cell> net, py::function loss_of_columns,
                                          std::shared_ptr<optim::Optimizer> opt) {
        // Called from the training loop without the GIL; the callable is
        // released under it too.
        auto held = std::shared_ptr<py::function>(new py::function(std::move(loss_of_columns)), [](py::function* f) {
          if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
          py::gil_scoped_acquire gil;
          delete f;
        });
        return std::make_shared<Model>(net, [held](const data::Batch& batch) {
          py::gil_scoped_acquire gil;
          py::list columns;
          columns.append(batch.inputs);
          columns.append(batch.labels);
          for (const Tensor& column : batch.extras) columns.append(column);
          return py::cast<Tensor>((*held)(*columns));
        }, opt);
      }, py::arg("network"), py::arg("loss_of_columns"), py::arg("optimizer"),
         "A Model whose network computes its own loss: loss_of_columns(*batch_columns) -> loss.")
      .def("train", [](Model& model, int epochs, std::shared_ptr<data::BatchSource> batches,
                       std::vector<std::shared_ptr<train::Callback>> callbacks,
                       std::shared_ptr<data::BatchSource> validation) {
        auto interrupt = std::make_shared<InterruptCheck>();
        callbacks.push_back(interrupt);
        std::vector<train::EpochInfo> history;
        {
          py::gil_scoped_release release;
          history = model.train(epochs, *batches, callbacks, validation.get());
        }
        interrupt->raise_if_interrupted();
        return history;
      }, py::arg("epochs"), py::arg("dataset"), py::arg("callbacks") = std::vector<std::shared_ptr<train::Callback>>{},
           py::arg("valid_dataset") = nullptr)
      .def("eval", [](Model& model, std::shared_ptr<data::BatchSource> batches) {
        train::EvalResult r;
        {
          py::gil_scoped_release release;
          r = model.eval(*batches);
        }
        py::dict d;
        for (auto& [k, v] : r.metrics) d[py::str(k)] = v;
        return d;
      }, py::arg("dataset"))
      .def("predict", [](Model& model, const Tensor& x) {
        py::gil_scoped_release release;
        return model.predict(x);
      })
      .def("set_mode", [](Model& model, const std::string& mode) {
        KILN_CHECK(mode == "graph" || mode == "eager", "mode is 'graph' or 'eager', not '", mode, "'");
        model.set_mode(mode == "graph" ? Mode::Graph : Mode::Eager);
      })
      .def("stop_training", &Model::stop_training)
      .def_property_readonly("global_step", &Model::global_step)
      .def_property_readonly("epochs_completed", &Model::epochs_completed)
      .def_property_readonly("compiled_graphs", [](const Model& model) {
        auto g = model.compiled_graphs();
        return py::make_tuple(g.train_step, g.inference);
      })
      .def("set_adapt_threads", &Model::set_adapt_threads)
      .def("set_mixed_precision", [](Model& m, std::optional<DType> dtype, std::optional<py::dict> scale) {
        train::MixedPrecision p;
        p.dtype = dtype;
        if (scale) {
          train::LossScale s;
          s.initial = (*scale)["initial"].cast<double>();
          s.growth_factor = (*scale)["growth_factor"].cast<double>();
          s.backoff_factor = (*scale)["backoff_factor"].cast<double>();
          s.growth_interval = (*scale)["growth_interval"].cast<int64_t>();
          s.dynamic = (*scale)["dynamic"].cast<bool>();
          p.loss_scale = s;
        }
        m.set_mixed_precision(p);
      }, py::arg("dtype"), py::arg("loss_scale") = py::none(),
      "Forward pass and loss under autocast in dtype (None: float32), and the loss scale given as a dict of "
      "kiln.train.LossScale's fields (None: dynamic for float16).")
      .def_property_readonly("loss_scale", [](Model& m) -> std::optional<double> {
        if (const train::LossScaler* s = m.loss_scaler()) return s->scale();
        return std::nullopt;
      })
      .def("set_dynamic_axes", [](Model& m, const std::vector<std::pair<int, int>>& axes) {
        std::vector<jit::DynamicAxis> dynamic;
        for (const auto& [input, axis] : axes) dynamic.push_back({input, axis});
        m.set_dynamic_axes(std::move(dynamic));
      }, "Graph mode: (input, axis) pairs whose size varies (Cell.set_inputs' None dimensions).");

  m.def("set_num_threads", &set_num_threads, py::arg("threads"));
  m.def("get_num_threads", &get_num_threads);
}

}  // namespace kiln::python

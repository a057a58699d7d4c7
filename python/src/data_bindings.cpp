// Datasets: Python sources (random access) and transforms (Python callables
// or Kiln's vision transforms) run through the C++ pipeline's workers.
#include "bindings.h"

namespace kiln::python {
namespace {

// A Python object with __len__ and __getitem__ returning (input, label, ...)
// or an input alone.
class PySourceDataset : public data::Dataset {
 public:
  explicit PySourceDataset(py::object source) : source_(new py::object(std::move(source))) {
    size_ = static_cast<int64_t>(py::len(*source_));
  }
  ~PySourceDataset() override {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
    py::gil_scoped_acquire gil;
    delete source_;
  }
  int64_t size() const override { return size_; }
  data::Sample get(int64_t index) const override {
    py::gil_scoped_acquire gil;
    py::object item = (*source_)[py::int_(index)];
    data::Sample s;
    if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
      auto seq = py::reinterpret_borrow<py::sequence>(item);
      KILN_CHECK(seq.size() >= 1, "a dataset item is (input, label, ...) or (input,), but item ", index, " is empty");
      s.input = to_tensor(seq[0]);
      if (seq.size() >= 2) s.label = to_tensor(seq[1]);
      for (size_t c = 2; c < seq.size(); ++c) s.extra.push_back(to_tensor(seq[c]));
    } else {
      s.input = to_tensor(item);
    }
    return s;
  }

 private:
  py::object* source_;  // deleted under the GIL
  int64_t size_;
};

data::Transform python_transform(py::function fn) {
  std::string name = py::hasattr(fn, "__name__") ? py::cast<std::string>(fn.attr("__name__"))
                                                 : std::string(py::str(fn.get_type().attr("__name__")));
  auto held = std::shared_ptr<py::object>(new py::object(std::move(fn)), [](py::object* p) {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
    py::gil_scoped_acquire gil;
    delete p;
  });
  return {name, [held](const Tensor& value, Generator&) {
            py::gil_scoped_acquire gil;
            return to_tensor((*held)(to_numpy(value)));
          }};
}

}  // namespace

void bind_data(py::module_& m) {
  py::class_<data::Dataset, std::shared_ptr<data::Dataset>>(m, "Dataset")
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& d, int64_t i) {
        if (i < 0) i += d.size();
        if (i < 0 || i >= d.size()) throw py::index_error("dataset index out of range");
        auto s = d.get(i);
        py::list row;
        row.append(s.input);
        row.append(s.label.defined() ? py::cast(s.label) : py::none());
        for (const Tensor& column : s.extra) row.append(column);
        return py::tuple(row);
      });
  py::class_<data::TensorDataset, data::Dataset, std::shared_ptr<data::TensorDataset>>(m, "TensorDataset")
      .def(py::init<Tensor, Tensor, std::vector<Tensor>>(), py::arg("inputs"), py::arg("labels"),
           py::arg("extras") = std::vector<Tensor>{})
      .def_readonly("inputs", &data::TensorDataset::inputs)
      .def_readonly("labels", &data::TensorDataset::labels)
      .def_readonly("extras", &data::TensorDataset::extras);
  py::class_<PySourceDataset, data::Dataset, std::shared_ptr<PySourceDataset>>(m, "SourceDataset")
      .def(py::init<py::object>(), py::arg("source"));
  py::class_<data::ImageFolderDataset, data::Dataset, std::shared_ptr<data::ImageFolderDataset>>(m, "ImageFolderDataset")
      .def(py::init([](const std::string& root, bool decode, bool skip_unreadable) {
             data::ImageFolderOptions o;
             o.decode = decode, o.skip_unreadable = skip_unreadable;
             return std::make_shared<data::ImageFolderDataset>(root, o);
           }),
           py::arg("dataset_dir"), py::arg("decode") = true, py::arg("skip_unreadable") = false)
      .def_property_readonly("class_names", &data::ImageFolderDataset::class_names);

  py::class_<data::Transform>(m, "Transform")
      .def(py::init(&python_transform), py::arg("fn"))
      .def_readonly("name", &data::Transform::name)
      .def("__call__", [](const data::Transform& t, py::handle value) {
        Tensor out;
        {
          Tensor in = to_tensor(value);
          py::gil_scoped_release release;
          out = t.apply(in, default_generator());
        }
        return out;
      })
      .def("__repr__", [](const data::Transform& t) { return "Transform(" + t.name + ")"; });
  py::implicitly_convertible<py::function, data::Transform>();

  py::class_<data::BatchSource, std::shared_ptr<data::BatchSource>>(m, "BatchSource")
      .def("start_epoch", &data::BatchSource::start_epoch)
      .def("next", [](data::BatchSource& s) -> py::object {
        data::Batch b;
        bool more;
        {
          py::gil_scoped_release release;
          more = s.next(b);
        }
        if (!more) return py::none();
        py::list row;
        row.append(b.inputs);
        row.append(b.labels);
        for (const Tensor& column : b.extras) row.append(column);
        return py::tuple(row);
      })
      .def_property_readonly("batches_per_epoch", &data::BatchSource::batches_per_epoch)
      .def_property_readonly("batch_size", &data::BatchSource::batch_size)
      .def("set_epoch", &data::BatchSource::set_epoch);
  py::class_<data::BatchIterator, data::BatchSource, std::shared_ptr<data::BatchIterator>>(m, "BatchIterator")
      .def(py::init<data::TensorDataset, int64_t, bool, bool, uint64_t>(), py::arg("dataset"), py::arg("batch_size"),
           py::arg("shuffle"), py::arg("drop_remainder") = false, py::arg("seed") = 0)
      .def("shard", &data::BatchIterator::shard, py::arg("num_shards"), py::arg("shard_id"), py::arg("pad") = true);
  py::class_<data::Pipeline, data::BatchSource, std::shared_ptr<data::Pipeline>>(m, "Pipeline")
      // Its workers may be running a Python transform, which waits for the
      // GIL: the pipeline is stopped and destroyed with the GIL released
      // (its Python objects take it again to be released themselves).
      .def(py::init([](std::shared_ptr<data::Dataset> source) {
             return std::shared_ptr<data::Pipeline>(new data::Pipeline(std::move(source)), [](data::Pipeline* p) {
               if (Py_IsInitialized() && PyGILState_Check()) {
                 py::gil_scoped_release release;
                 delete p;
               } else {
                 delete p;
               }
             });
           }),
           py::arg("source"))
      .def("map", [](data::Pipeline& p, std::vector<data::Transform> ts, py::object column) -> data::Pipeline& {
        if (py::isinstance<py::int_>(column)) {
          const auto index = py::cast<int64_t>(column);
          KILN_CHECK(index >= 0, "a column position is 0 (the input), 1 (the label) or more, not ", index);
          return p.map(std::move(ts), static_cast<size_t>(index));
        }
        const auto name = py::cast<std::string>(column);
        KILN_CHECK(name == "input" || name == "label", "a transform applies to the 'input' or the 'label' column, or to ",
                   "a column by position, not '", name, "'");
        return p.map(std::move(ts), name == "input" ? data::Column::Input : data::Column::Label);
      }, py::arg("transforms"), py::arg("column") = "input", py::return_value_policy::reference_internal)
      .def("shuffle", &data::Pipeline::shuffle, py::return_value_policy::reference_internal)
      .def("seed", &data::Pipeline::seed, py::return_value_policy::reference_internal)
      .def("skip", &data::Pipeline::skip, py::return_value_policy::reference_internal)
      .def("take", &data::Pipeline::take, py::return_value_policy::reference_internal)
      .def("batch", &data::Pipeline::batch, py::arg("batch_size"), py::arg("drop_remainder") = false,
           py::return_value_policy::reference_internal)
      .def("repeat", &data::Pipeline::repeat, py::return_value_policy::reference_internal)
      .def("num_parallel_workers", &data::Pipeline::num_parallel_workers, py::return_value_policy::reference_internal)
      .def("prefetch", &data::Pipeline::prefetch, py::return_value_policy::reference_internal)
      .def("sampler", [](data::Pipeline& p, std::shared_ptr<data::Sampler> s) -> data::Pipeline& { return p.sampler(s); },
           py::return_value_policy::reference_internal)
      .def_property_readonly("samples_per_epoch", &data::Pipeline::samples_per_epoch);
  py::class_<data::Sampler, std::shared_ptr<data::Sampler>>(m, "Sampler");
  py::class_<data::DistributedSampler, data::Sampler, std::shared_ptr<data::DistributedSampler>>(m, "DistributedSampler")
      .def(py::init<int64_t, int64_t, bool, uint64_t, bool>(), py::arg("num_shards"), py::arg("shard_id"),
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("pad") = true);

  auto vision = m.def_submodule("vision", "Kiln's image transforms, run in C++ by the pipeline's workers.");
  using data::vision::Layout;
  auto layout = [](bool hwc) { return hwc ? Layout::HWC : Layout::CHW; };
  vision.def("decode", &data::vision::decode, py::arg("channels") = 3);
  vision.def("resize", [=](int64_t h, int64_t w, bool hwc) { return data::vision::resize(h, w, layout(hwc)); },
             py::arg("height"), py::arg("width"), py::arg("hwc") = true);
  vision.def("random_crop", [=](int64_t h, int64_t w, int64_t padding, double fill, bool hwc) {
    return data::vision::random_crop(h, w, padding, fill, layout(hwc));
  }, py::arg("height"), py::arg("width"), py::arg("padding") = 0, py::arg("fill") = 0.0, py::arg("hwc") = true);
  vision.def("center_crop", [=](int64_t h, int64_t w, bool hwc) { return data::vision::center_crop(h, w, layout(hwc)); },
             py::arg("height"), py::arg("width"), py::arg("hwc") = true);
  vision.def("random_horizontal_flip", [=](double p, bool hwc) { return data::vision::random_horizontal_flip(p, layout(hwc)); },
             py::arg("prob") = 0.5, py::arg("hwc") = true);
  vision.def("random_rotation", [=](double degrees, double fill, bool hwc) {
    return data::vision::random_rotation(degrees, fill, layout(hwc));
  }, py::arg("degrees"), py::arg("fill") = 0.0, py::arg("hwc") = true);
  vision.def("rescale", &data::vision::rescale, py::arg("rescale"), py::arg("shift") = 0.0);
  vision.def("normalize", [=](std::vector<double> mean, std::vector<double> std, bool hwc) {
    return data::vision::normalize(mean, std, layout(hwc));
  }, py::arg("mean"), py::arg("std"), py::arg("hwc") = true);
  vision.def("hwc_to_chw", &data::vision::hwc_to_chw);
  vision.def("random_erasing", [=](double p, std::pair<double, double> scale, std::pair<double, double> ratio,
                                   double value, bool hwc) {
    return data::vision::random_erasing(p, scale, ratio, value, layout(hwc));
  }, py::arg("prob") = 0.5, py::arg("scale") = std::pair<double, double>{0.02, 0.33},
             py::arg("ratio") = std::pair<double, double>{0.3, 3.3}, py::arg("value") = 0.0, py::arg("hwc") = false);
  vision.def("type_cast", [](py::object dtype) {
    DType d = dtype_of(dtype);
    return data::Transform{std::string("type_cast(") + dtype_name(d) + ")",
                           [d](const Tensor& v, Generator&) { return v.to(d); }};
  }, py::arg("dtype"));

  m.def("load_fashion_mnist", [](const std::string& split, const std::string& dir) {
    py::gil_scoped_release release;
    return data::load_fashion_mnist(split, dir);
  }, py::arg("split"), py::arg("dataset_dir") = std::string(data::kFashionMnistDir));
  m.def("load_mnist", [](const std::string& dir, const std::string& split) {
    py::gil_scoped_release release;
    return data::load_mnist(dir, split);
  }, py::arg("dataset_dir"), py::arg("split"));
  m.def("load_cifar10", [](const std::string& dir, const std::string& split) {
    py::gil_scoped_release release;
    return data::load_cifar10(dir, split);
  }, py::arg("dataset_dir"), py::arg("split"));
}

}  // namespace kiln::python

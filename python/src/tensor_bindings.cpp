// kiln.Tensor: creation, NumPy and DLPack exchange, indexing, operators.
#include <dlpack/dlpack.h>

#include <cstring>

#include "bindings.h"
#include "kiln/backend.h"

namespace kiln::python {

Tensor true_divide(const Tensor& a, const Tensor& b) {
  if (!is_floating(a.dtype()) && !is_floating(b.dtype())) return div(a.to(DType::Float32), b.to(DType::Float32));
  return div(a, b);
}

namespace {

const char* numpy_format(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Bool: return "bool";
    case DType::Int8: return "int8";
    case DType::BFloat16: break;
  }
  return nullptr;
}

// A tensor over memory someone else owns: shape and strides in elements.
Tensor tensor_over(Storage storage, Shape shape, Strides strides, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

// Keeps a Python object alive until a storage lets go of it, which may
// happen on any thread (a pipeline worker, a compiled graph).
std::function<void()> holding(py::handle owner) {
  PyObject* held = owner.ptr();
  Py_INCREF(held);
  return [held] {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
    py::gil_scoped_acquire gil;
    Py_DECREF(held);
  };
}

Tensor from_numpy(py::array array) {
  std::string name = py::str(array.dtype().attr("name"));
  DType dtype;
  try {
    dtype = dtype_from_name(name);
  } catch (const Error&) {
    throw py::type_error("kiln cannot hold NumPy arrays of dtype " + name +
                         "; convert it first (e.g. array.astype(numpy.float32))");
  }
  KILN_CHECK(numpy_format(dtype) != nullptr, "NumPy dtype ", name, " has no kiln counterpart");
  const auto item = static_cast<py::ssize_t>(dtype_size(dtype));
  bool shareable = array.writeable() && (array.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_) && array.dtype().byteorder() != '>';
  for (py::ssize_t i = 0; i < array.ndim() && shareable; ++i)
    shareable = array.strides(i) >= 0 && array.strides(i) % item == 0;
  if (!shareable) array = py::array::ensure(py::module_::import("numpy").attr("array")(array), py::array::c_style);
  Shape shape(array.shape(), array.shape() + array.ndim());
  Strides strides;
  py::ssize_t extent = 1;
  for (py::ssize_t i = 0; i < array.ndim(); ++i) {
    strides.push_back(array.strides(i) / item);
    if (array.shape(i) == 0) extent = 0;
  }
  if (extent) {
    for (py::ssize_t i = 0; i < array.ndim(); ++i) extent += (array.shape(i) - 1) * strides[i];
  }
  auto storage = external_storage(array.mutable_data(), static_cast<size_t>(extent * item), cpu_device(), holding(array));
  return tensor_over(storage, shape, strides, dtype);
}

// --- DLPack -------------------------------------------------------------------

struct DLPackExport {
  std::shared_ptr<TensorImpl> impl;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed{};
};

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::Float32: return {kDLFloat, 32, 1};
    case DType::Float64: return {kDLFloat, 64, 1};
    case DType::Float16: return {kDLFloat, 16, 1};
    case DType::BFloat16: return {kDLBfloat, 16, 1};
    case DType::Int32: return {kDLInt, 32, 1};
    case DType::Int64: return {kDLInt, 64, 1};
    case DType::Int8: return {kDLInt, 8, 1};
    case DType::UInt8: return {kDLUInt, 8, 1};
    case DType::Bool: return {6 /* kDLBool, DLPack 0.8 */, 8, 1};
  }
  return {kDLFloat, 32, 1};
}

DType from_dl_dtype(DLDataType t) {
  KILN_CHECK(t.lanes == 1, "from_dlpack: vector dtypes (lanes = ", t.lanes, ") are not supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::Float32;
  if (t.code == kDLFloat && t.bits == 64) return DType::Float64;
  if (t.code == kDLFloat && t.bits == 16) return DType::Float16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::BFloat16;
  if (t.code == kDLInt && t.bits == 32) return DType::Int32;
  if (t.code == kDLInt && t.bits == 64) return DType::Int64;
  if (t.code == kDLInt && t.bits == 8) return DType::Int8;
  if (t.code == kDLUInt && t.bits == 8) return DType::UInt8;
  if (t.code == 6 && t.bits == 8) return DType::Bool;
  KILN_FAIL("from_dlpack: DLPack dtype (code ", int(t.code), ", ", int(t.bits),
            " bits) has no kiln counterpart; convert the tensor to float32, int64, uint8 or bool first");
}

// DLPack's name for a tensor's device: the CPU, CUDA, or a device DLPack
// has no type for (kDLExtDev: the reference backend's memory).
DLDevice dl_device(Device d) {
  if (d.type == DeviceType::CPU) return {kDLCPU, 0};
  if (d.type == DeviceType::CUDA) return {kDLCUDA, d.index};
  return {kDLExtDev, d.index};
}

// A CPU or CUDA tensor, shared without a copy. Kiln's CUDA work goes to the
// device's default stream: the device is waited for, so that the consumer's
// stream, whichever it is, reads finished data.
py::capsule to_dlpack(const Tensor& t) {
  const bool cuda = t.device().type == DeviceType::CUDA;
  if (t.device().type != DeviceType::CPU && !cuda)
    throw py::buffer_error("__dlpack__: the tensor is on " + t.device().str() +
                           ", which no DLPack consumer can read; call .to('cpu') first");
  if (cuda) backend(DeviceType::CUDA).synchronize(t.device().index);
  auto* ex = new DLPackExport{t.impl_ptr(), t.shape(), t.strides()};
  DLTensor& dl = ex->managed.dl_tensor;
  dl.data = cuda ? t.device_data() : t.raw_data();
  dl.device = dl_device(t.device());
  dl.ndim = static_cast<int32_t>(t.dim());
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = ex->shape.data();
  dl.strides = ex->strides.data();
  dl.byte_offset = 0;
  ex->managed.manager_ctx = ex;
  ex->managed.deleter = [](DLManagedTensor* m) { delete static_cast<DLPackExport*>(m->manager_ctx); };
  PyObject* cap = PyCapsule_New(&ex->managed, "dltensor", [](PyObject* c) {
    // A consumer renames the capsule "used_dltensor" and owns the tensor from then on.
    if (PyCapsule_IsValid(c, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
      m->deleter(m);
    }
  });
  if (!cap) throw py::error_already_set();
  return py::reinterpret_steal<py::capsule>(cap);
}

// A CPU or CUDA tensor of another library, shared without a copy. A CUDA
// producer is asked for its data on the legacy default stream (stream=1),
// which Kiln's kernels run on.
Tensor from_dlpack(py::object source) {
  py::object cap = source;
  if (py::hasattr(source, "__dlpack__")) {
    bool cuda = false;
    if (py::hasattr(source, "__dlpack_device__"))
      cuda = source.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>() == kDLCUDA;
    cap = cuda ? source.attr("__dlpack__")(py::arg("stream") = 1) : source.attr("__dlpack__")();
  }
  KILN_CHECK(PyCapsule_IsValid(cap.ptr(), "dltensor"),
             "from_dlpack needs an object with __dlpack__ (a NumPy array, a torch tensor) or an unused DLPack capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
  const DLTensor& dl = m->dl_tensor;
  KILN_CHECK(dl.device.device_type == kDLCPU || dl.device.device_type == kDLCUDA,
             "from_dlpack: the tensor is on DLPack device ", int(dl.device.device_type),
             "; Kiln reads CPU and CUDA memory (move it to one of them first)");
  const Device device = dl.device.device_type == kDLCUDA ? Device{DeviceType::CUDA, dl.device.device_id} : cpu_device();
  if (device.type == DeviceType::CUDA)
    backend(DeviceType::CUDA);  // (says how to get the CUDA backend where it is missing)
  DType dtype = from_dl_dtype(dl.dtype);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  Strides strides = dl.strides ? Strides(dl.strides, dl.strides + dl.ndim) : contiguous_strides(shape);
  int64_t extent = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(strides[i] >= 0, "from_dlpack: negative strides are not supported; make the tensor contiguous first");
    if (shape[i] == 0) extent = 0;
  }
  if (extent)
    for (size_t i = 0; i < shape.size(); ++i) extent += (shape[i] - 1) * strides[i];
  PyCapsule_SetName(cap.ptr(), "used_dltensor");
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  auto storage = external_storage(data, static_cast<size_t>(extent) * dtype_size(dtype), device, [m] {
    if (m->deleter) m->deleter(m);
  });
  return tensor_over(storage, shape, strides, dtype);
}

// --- indexing -----------------------------------------------------------------

bool is_advanced(py::handle item) {
  return py::isinstance<Tensor>(item) || py::isinstance<py::array>(item) || py::isinstance<py::list>(item);
}

// Indices along one axis, negative ones counted from the end.
Tensor positions(const Tensor& index, int64_t size) {
  KILN_CHECK(is_integral(index.dtype()), "tensor indices must be integers or bools, not ", dtype_name(index.dtype()));
  auto values = index.to(DType::Int64).contiguous().to_vector<int64_t>();
  for (auto& v : values) {
    if (v < -size || v >= size) throw py::index_error("index " + std::to_string(v) + " is out of range for an axis of size " + std::to_string(size));
    if (v < 0) v += size;
  }
  return from_vector(values, index.shape());
}

Tensor nonzero_positions(const Tensor& mask) {
  auto values = mask.contiguous().to_vector<bool>();
  std::vector<int64_t> at;
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i]) at.push_back(static_cast<int64_t>(i));
  return from_vector(at);
}

Tensor get_item(const Tensor& t, py::handle key) {
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(key)) {
    for (auto item : py::reinterpret_borrow<py::tuple>(key)) items.push_back(item);
  } else {
    items.push_back(key);
  }
  // A boolean mask over the leading axes selects the elements where it is true.
  if (items.size() == 1 && is_advanced(items[0])) {
    Tensor mask = to_tensor(items[0]);
    if (mask.dtype() == DType::Bool) {
      KILN_CHECK(mask.dim() <= t.dim(), "boolean index of shape ", shape_str(mask.shape()), " has more axes than the tensor ",
                 shape_str(t.shape()));
      for (int64_t i = 0; i < mask.dim(); ++i)
        KILN_CHECK(mask.shape()[i] == t.shape()[i], "boolean index of shape ", shape_str(mask.shape()),
                   " does not match the tensor's shape ", shape_str(t.shape()));
      Tensor flat = mask.dim() == 0 ? t.unsqueeze(0) : t.flatten(0, mask.dim() - 1);
      return index_select(flat, 0, nonzero_positions(mask.reshape({-1})));
    }
  }
  int64_t consumed = 0, advanced = 0;
  for (auto item : items) {
    if (item.is_none() || item.ptr() == Py_Ellipsis) continue;
    ++consumed;
    if (is_advanced(item)) ++advanced;
  }
  KILN_CHECK(advanced <= 1, "indexing with more than one index tensor is not supported; index one axis at a time");
  KILN_CHECK(consumed <= t.dim(), "too many indices (", consumed, ") for a tensor of ", t.dim(), " axes");
  Tensor out = t;
  int64_t axis = 0;
  bool seen_ellipsis = false;
  for (auto item : items) {
    if (item.ptr() == Py_Ellipsis) {
      KILN_CHECK(!seen_ellipsis, "an index can only have a single ellipsis ('...')");
      seen_ellipsis = true;
      axis += t.dim() - consumed;
    } else if (item.is_none()) {
      out = out.unsqueeze(axis++);
    } else if (py::isinstance<py::slice>(item)) {
      int64_t size = out.shape()[axis];
      py::ssize_t start, stop, step, length;
      if (PySlice_GetIndicesEx(item.ptr(), size, &start, &stop, &step, &length) != 0) throw py::error_already_set();
      KILN_CHECK(step > 0, "slices with a negative step are not supported; index with a reversed index list instead");
      out = length == 0 ? out.slice(axis, 0, 0) : out.slice(axis, start, stop, step);
      ++axis;
    } else if (is_advanced(item)) {
      Tensor index = to_tensor(item);
      KILN_CHECK(index.dtype() != DType::Bool, "a boolean index must be the only index");
      Tensor at = positions(index, out.shape()[axis]);
      Tensor picked = index_select(out, axis, at.reshape({-1}));
      Shape s(picked.shape().begin(), picked.shape().begin() + axis);
      s.insert(s.end(), at.shape().begin(), at.shape().end());
      s.insert(s.end(), picked.shape().begin() + axis + 1, picked.shape().end());
      out = picked.reshape(s);
      axis += at.dim();
    } else if (py::isinstance<py::int_>(item) || py::hasattr(item, "__index__")) {
      int64_t i = py::cast<int64_t>(py::reinterpret_borrow<py::object>(item).attr("__index__")());
      int64_t size = out.shape()[axis];
      if (i < -size || i >= size)
        throw py::index_error("index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) +
                              " of size " + std::to_string(size));
      out = out.select(axis, i);
    } else {
      throw py::type_error("tensors are indexed by ints, slices, None, ..., index tensors or lists; got " +
                           std::string(py::str(item.get_type().attr("__name__"))));
    }
  }
  return out;
}

void set_item(Tensor& t, py::handle key, py::handle value) {
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(key)) {
    for (auto item : py::reinterpret_borrow<py::tuple>(key)) items.push_back(item);
  } else {
    items.push_back(key);
  }
  for (auto item : items)
    KILN_CHECK(!is_advanced(item), "assignment through an index tensor is not supported; use kiln.scatter_nd or "
               "kiln.where to build the new tensor");
  Tensor view = get_item(t, key);
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) {
    view.fill_(py::cast<double>(value));
  } else {
    view.copy_(operand(value, view));
  }
}

// --- operators ----------------------------------------------------------------

std::vector<int64_t> axes_of(py::handle axis) {
  if (axis.is_none()) return {};
  if (py::isinstance<py::int_>(axis)) return {py::cast<int64_t>(axis)};
  return py::cast<std::vector<int64_t>>(axis);
}

// Shape arguments given as reshape(2, 3) or reshape((2, 3)).
Shape shape_args(const py::args& args) {
  if (args.size() == 1) return shape_of(args[0]);
  Shape s;
  for (auto a : args) s.push_back(py::cast<int64_t>(a));
  return s;
}

}  // namespace

DType dtype_of(py::handle value) {
  if (py::isinstance<DType>(value)) return py::cast<DType>(value);
  if (py::isinstance<py::str>(value)) return dtype_from_name(py::cast<std::string>(value));
  py::object np_dtype = py::module_::import("numpy").attr("dtype")(value);
  std::string name = py::str(np_dtype.attr("name"));
  return dtype_from_name(name);
}

Shape shape_of(py::handle value) {
  if (py::isinstance<py::int_>(value)) return {py::cast<int64_t>(value)};
  try {
    return py::cast<Shape>(value);
  } catch (const py::cast_error&) {
    throw py::type_error("a shape is an int or a sequence of ints, not " +
                         std::string(py::str(value.get_type().attr("__name__"))));
  }
}

Tensor to_tensor(py::handle value, std::optional<DType> dtype) {
  Tensor t;
  if (py::isinstance<Tensor>(value)) {
    t = py::cast<Tensor>(value);
  } else if (PyBool_Check(value.ptr())) {
    t = scalar_tensor(value.ptr() == Py_True ? 1 : 0, dtype.value_or(DType::Bool));
  } else if (PyLong_Check(value.ptr())) {
    t = scalar_tensor(py::cast<double>(value), dtype.value_or(DType::Int64));
  } else if (PyFloat_Check(value.ptr())) {
    t = scalar_tensor(py::cast<double>(value), dtype.value_or(DType::Float32));
  } else if (py::isinstance<py::array>(value)) {
    t = from_numpy(py::reinterpret_borrow<py::array>(value));
  } else if (py::hasattr(value, "__dlpack__") && !py::hasattr(value, "__array_interface__")) {
    t = from_dlpack(py::reinterpret_borrow<py::object>(value));
  } else {
    py::array array = py::module_::import("numpy").attr("asarray")(value);
    // Python floats become float32, as in MindSpore and PyTorch, not NumPy's float64.
    if (!dtype && array.dtype().kind() == 'f') array = array.attr("astype")("float32");
    if (array.dtype().kind() == 'O' || array.dtype().kind() == 'U')
      throw py::type_error("cannot make a tensor of " + std::string(py::str(value.get_type().attr("__name__"))) +
                           ": expected numbers, nested lists of numbers, a NumPy array or a Tensor");
    t = from_numpy(array);
  }
  if (dtype && t.dtype() != *dtype) t = t.to(*dtype);
  return t;
}

Tensor operand(py::handle value, const Tensor& like) {
  if (PyFloat_Check(value.ptr()))
    return scalar_tensor(py::cast<double>(value), is_floating(like.dtype()) ? like.dtype() : DType::Float32);
  if (PyLong_Check(value.ptr()) || PyBool_Check(value.ptr()))
    return scalar_tensor(py::cast<double>(value), like.dtype() == DType::Bool ? DType::Int64 : like.dtype());
  return to_tensor(value);
}

py::array to_numpy(const Tensor& tensor) {
  Tensor t = tensor;
  if (t.device().type != DeviceType::CPU) t = t.detach().to(cpu_device());
  if (t.dtype() == DType::BFloat16) t = t.detach().to(DType::Float32);
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides;
  for (int64_t s : t.strides()) strides.push_back(static_cast<py::ssize_t>(s * t.element_size()));
  auto* keep = new std::shared_ptr<TensorImpl>(t.impl_ptr());
  py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<TensorImpl>*>(p); });
  return py::array(py::dtype(numpy_format(t.dtype())), shape, strides, t.raw_data(), base);
}

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype", "Element types of tensors.")
      .value("float32", DType::Float32)
      .value("float64", DType::Float64)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("uint8", DType::UInt8)
      .value("bool", DType::Bool)
      .value("int8", DType::Int8)
      .def_property_readonly("itemsize", [](DType d) { return dtype_size(d); })
      .def_property_readonly("is_floating_point", [](DType d) { return is_floating(d); })
      .def("__str__", [](DType d) { return std::string("kiln.") + dtype_name(d); });

  py::class_<Tensor> t(m, "Tensor", R"(An n-dimensional array on a device, with autograd.

Tensor(data)            from a NumPy array (sharing its memory), a number or nested lists
Tensor(data, dtype)     converted to dtype
Tensor(shape=(2, 3), dtype=kiln.float32)   zeros of that shape (MindSpore's form)
)");
  t.def(py::init([](py::object data, py::object dtype, py::object shape) {
          std::optional<DType> d;
          if (!dtype.is_none()) d = dtype_of(dtype);
          if (data.is_none()) {
            if (shape.is_none()) throw py::type_error("Tensor() needs data or a shape");
            return zeros(shape_of(shape), d.value_or(DType::Float32));
          }
          return to_tensor(data, d);
        }),
        py::arg("data") = py::none(), py::arg("dtype") = py::none(), py::arg("shape") = py::none())
      .def_property_readonly("shape", [](const Tensor& x) { return py::tuple(py::cast(x.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("size", &Tensor::numel, "The number of elements (MindSpore's Tensor.size).")
      .def("numel", &Tensor::numel)
      .def("dim", &Tensor::dim)
      .def_property_readonly("itemsize", &Tensor::element_size)
      .def_property_readonly("nbytes", [](const Tensor& x) { return x.numel() * static_cast<int64_t>(x.element_size()); })
      .def_property_readonly("strides", [](const Tensor& x) { return py::tuple(py::cast(x.strides())); })
      .def_property_readonly("device", [](const Tensor& x) { return x.device().str(); })
      .def("is_contiguous", &Tensor::is_contiguous)
      // The first element's address in its device's memory (as PyTorch's), which the host may not read.
      .def("data_ptr", [](const Tensor& x) {
        return reinterpret_cast<uintptr_t>(static_cast<char*>(x.impl().storage->data) +
                                           x.offset() * static_cast<int64_t>(x.element_size()));
      })
      .def("__len__", [](const Tensor& x) {
        if (x.dim() == 0) throw py::type_error("len() of a 0-d tensor");
        return x.shape()[0];
      })
      .def("__repr__", [](const Tensor& x) { return x.str(); })
      .def("__hash__", [](const Tensor& x) { return reinterpret_cast<uintptr_t>(x.impl_ptr().get()); })
      .def("numpy", &to_numpy, "A NumPy array over the tensor's memory (no copy where the dtype and device allow).")
      .def("asnumpy", &to_numpy, "MindSpore's name for numpy().")
      .def("item", [](const Tensor& x) -> py::object {
        KILN_CHECK(x.numel() == 1, "item() needs a tensor of one element, not ", x.meta_str(), "; index it first");
        if (is_floating(x.dtype())) return py::float_(x.item<double>());
        if (x.dtype() == DType::Bool) return py::bool_(x.item<double>() != 0);
        return py::int_(x.item<int64_t>());
      }, "The value of a one-element tensor as a Python number.")
      .def("tolist", [](const Tensor& x) { return to_numpy(x).attr("tolist")(); })
      .def("__array__", [](const Tensor& x, py::object dtype) {
        py::array a = to_numpy(x);
        return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
      }, py::arg("dtype") = py::none())
      .def("__dlpack__", [](const Tensor& x, py::object stream) { return to_dlpack(x); }, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Tensor& x) {
        const DLDevice d = dl_device(x.device());
        return py::make_tuple(int(d.device_type), d.device_id);
      })
      .def("__getitem__", &get_item)
      .def("__setitem__", &set_item)
      // views and copies
      .def("reshape", [](const Tensor& x, py::args s) { return x.reshape(shape_args(s)); })
      .def("view", [](const Tensor& x, py::args s) { return x.view(shape_args(s)); })
      .def("transpose", [](const Tensor& x, py::args dims) {
        // transpose(0, 1) swaps two axes (PyTorch); transpose((2, 0, 1)) permutes (MindSpore, NumPy).
        Shape order;
        if (dims.size() == 0) {
          for (int64_t i = x.dim() - 1; i >= 0; --i) order.push_back(i);
          return x.permute(order);
        }
        order = shape_args(dims);
        if (static_cast<int64_t>(order.size()) == x.dim())
          return x.permute(order);
        KILN_CHECK(order.size() == 2, "transpose takes two axes to swap or a permutation of all ", x.dim(), " axes");
        return x.transpose(order[0], order[1]);
      })
      .def("permute", [](const Tensor& x, py::args dims) { return x.permute(shape_args(dims)); })
      .def_property_readonly("T", [](const Tensor& x) {
        std::vector<int64_t> o;
        for (int64_t i = x.dim() - 1; i >= 0; --i) o.push_back(i);
        return x.permute(o);
      })
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
      .def("squeeze", [](const Tensor& x, py::object axis) {
        return axis.is_none() ? x.squeeze() : x.squeeze(py::cast<int64_t>(axis));
      }, py::arg("axis") = py::none())
      .def("unsqueeze", &Tensor::unsqueeze, py::arg("axis"))
      .def("expand_dims", &Tensor::unsqueeze, py::arg("axis"))
      .def("expand", [](const Tensor& x, py::args s) { return x.expand(shape_args(s)); })
      .def("broadcast_to", [](const Tensor& x, py::object s) { return x.expand(shape_of(s)); })
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("copy", &Tensor::clone)
      .def("astype", [](const Tensor& x, py::object d) { return x.to(dtype_of(d)); }, py::arg("dtype"))
      .def("to", [](const Tensor& x, py::object target) {
        if (py::isinstance<py::str>(target)) {
          std::string s = py::cast<std::string>(target);
          std::optional<Device> device;
          try {
            device = parse_device(s);
          } catch (const Error&) {
            return x.to(dtype_from_name(s));  // not a device: a dtype's name, or an error naming both
          }
          return x.to(*device);  // a device this build may lack says so itself
        }
        return x.to(dtype_of(target));
      })
      .def("float", [](const Tensor& x) { return x.to(DType::Float32); })
      .def("double", [](const Tensor& x) { return x.to(DType::Float64); })
      .def("long", [](const Tensor& x) { return x.to(DType::Int64); })
      .def("int", [](const Tensor& x) { return x.to(DType::Int32); })
      .def("bool", [](const Tensor& x) { return x.to(DType::Bool); })
      // in place
      .def("fill_", [](Tensor& x, double v) { x.fill_(v); return x; })
      .def("zero_", [](Tensor& x) { x.zero_(); return x; })
      .def("copy_", [](Tensor& x, py::handle src) { x.copy_(operand(src, x)); return x; })
      .def("set_data", [](Tensor& x, py::handle src) { NoGradGuard g; x.copy_(operand(src, x)); return x; },
           "Overwrites the values (no gradient is recorded), as MindSpore's Parameter.set_data.")
      // autograd
      .def_property("requires_grad", &Tensor::requires_grad, [](Tensor& x, bool on) { x.set_requires_grad(on); })
      .def("requires_grad_", [](Tensor& x, bool on) { x.set_requires_grad(on); return x; }, py::arg("requires_grad") = true)
      .def_property("grad", [](const Tensor& x) -> py::object {
        Tensor g = x.grad();
        return g.defined() ? py::cast(g) : py::none();
      }, [](Tensor& x, py::object g) {
        if (g.is_none()) x.zero_grad();
        else x.impl().grad = to_tensor(g).impl_ptr();
      })
      .def_property_readonly("is_leaf", &Tensor::is_leaf)
      .def_property_readonly("grad_fn", [](const Tensor& x) -> py::object {
        auto fn = x.grad_fn();
        if (!fn || !fn->op) return py::none();
        return py::str(fn->op->name);
      }, "The name of the op that made this tensor (None for leaves).")
      .def("detach", &Tensor::detach)
      .def("backward", [](const Tensor& x, py::object gradient, bool retain_graph) {
        Tensor g = gradient.is_none() ? Tensor() : operand(gradient, x);
        py::gil_scoped_release release;
        x.backward(g, retain_graph);
      }, py::arg("gradient") = py::none(), py::arg("retain_graph") = false)
      // operators
      .def("__add__", [](const Tensor& a, py::handle b) { return add(a, operand(b, a)); }, py::is_operator())
      .def("__radd__", [](const Tensor& a, py::handle b) { return add(operand(b, a), a); }, py::is_operator())
      .def("__sub__", [](const Tensor& a, py::handle b) { return sub(a, operand(b, a)); }, py::is_operator())
      .def("__rsub__", [](const Tensor& a, py::handle b) { return sub(operand(b, a), a); }, py::is_operator())
      .def("__mul__", [](const Tensor& a, py::handle b) { return mul(a, operand(b, a)); }, py::is_operator())
      .def("__rmul__", [](const Tensor& a, py::handle b) { return mul(operand(b, a), a); }, py::is_operator())
      .def("__truediv__", [](const Tensor& a, py::handle b) { return true_divide(a, operand(b, a)); }, py::is_operator())
      .def("__rtruediv__", [](const Tensor& a, py::handle b) { return true_divide(operand(b, a), a); }, py::is_operator())
      .def("__floordiv__", [](const Tensor& a, py::handle b) {
        Tensor o = operand(b, a);
        return is_floating(a.dtype()) || is_floating(o.dtype()) ? floor(div(a, o)) : div(sub(a, remainder(a, o)), o);
      }, py::is_operator())
      .def("__mod__", [](const Tensor& a, py::handle b) { return remainder(a, operand(b, a)); }, py::is_operator())
      .def("__rmod__", [](const Tensor& a, py::handle b) { return remainder(operand(b, a), a); }, py::is_operator())
      .def("__pow__", [](const Tensor& a, py::handle b) {
        if (PyFloat_Check(b.ptr()) || PyLong_Check(b.ptr())) return pow(a, py::cast<double>(b));
        return pow(a, operand(b, a));
      }, py::is_operator())
      .def("__rpow__", [](const Tensor& a, py::handle b) { return pow(operand(b, a), a); }, py::is_operator())
      .def("__matmul__", [](const Tensor& a, py::handle b) { return matmul(a, to_tensor(b)); }, py::is_operator())
      .def("__rmatmul__", [](const Tensor& a, py::handle b) { return matmul(to_tensor(b), a); }, py::is_operator())
      .def("__neg__", [](const Tensor& a) { return neg(a); })
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__abs__", [](const Tensor& a) { return abs(a); })
      .def("__eq__", [](const Tensor& a, py::handle b) { return eq(a, operand(b, a)); }, py::is_operator())
      .def("__ne__", [](const Tensor& a, py::handle b) { return ne(a, operand(b, a)); }, py::is_operator())
      .def("__lt__", [](const Tensor& a, py::handle b) { return lt(a, operand(b, a)); }, py::is_operator())
      .def("__le__", [](const Tensor& a, py::handle b) { return le(a, operand(b, a)); }, py::is_operator())
      .def("__gt__", [](const Tensor& a, py::handle b) { return gt(a, operand(b, a)); }, py::is_operator())
      .def("__ge__", [](const Tensor& a, py::handle b) { return ge(a, operand(b, a)); }, py::is_operator())
      .def("__iadd__", [](Tensor& a, py::handle b) { a.copy_(add(a, operand(b, a))); return a; }, py::is_operator())
      .def("__isub__", [](Tensor& a, py::handle b) { a.copy_(sub(a, operand(b, a))); return a; }, py::is_operator())
      .def("__imul__", [](Tensor& a, py::handle b) { a.copy_(mul(a, operand(b, a))); return a; }, py::is_operator())
      .def("__itruediv__", [](Tensor& a, py::handle b) { a.copy_(div(a, operand(b, a))); return a; }, py::is_operator())
      .def("__bool__", [](const Tensor& x) {
        KILN_CHECK(x.numel() == 1, "the truth value of a tensor of ", x.numel(), " elements is ambiguous; use .any() or .all()");
        return x.item<double>() != 0;
      })
      .def("__float__", [](const Tensor& x) { return x.item<double>(); })
      .def("__int__", [](const Tensor& x) { return x.item<int64_t>(); })
      .def("__index__", [](const Tensor& x) {
        KILN_CHECK(is_integral(x.dtype()) && x.numel() == 1, "only one-element integer tensors can be used as an index");
        return x.item<int64_t>();
      })
      // reductions with MindSpore's and PyTorch's keyword names
      .def("sum", [](const Tensor& x, py::object axis, bool keepdims, bool keep_dims) {
        return sum(x, axes_of(axis), keepdims || keep_dims);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false, py::arg("keep_dims") = false)
      .def("mean", [](const Tensor& x, py::object axis, bool keepdims, bool keep_dims) {
        return mean(x, axes_of(axis), keepdims || keep_dims);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false, py::arg("keep_dims") = false)
      .def("max", [](const Tensor& x, py::object axis, bool keepdims) { return amax(x, axes_of(axis), keepdims); },
           py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("min", [](const Tensor& x, py::object axis, bool keepdims) { return amin(x, axes_of(axis), keepdims); },
           py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("argmax", [](const Tensor& x, py::object axis, bool keepdims) {
        if (axis.is_none()) return argmax(x.reshape({-1}), 0, false);
        return argmax(x, py::cast<int64_t>(axis), keepdims);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("argmin", [](const Tensor& x, py::object axis, bool keepdims) {
        if (axis.is_none()) return argmin(x.reshape({-1}), 0, false);
        return argmin(x, py::cast<int64_t>(axis), keepdims);
      }, py::arg("axis") = py::none(), py::arg("keepdims") = false)
      .def("all", [](const Tensor& x) { return py::bool_(amin(ne(x, scalar_tensor(0, x.dtype())).to(DType::Int32)).item<int64_t>() != 0); })
      .def("any", [](const Tensor& x) { return py::bool_(amax(ne(x, scalar_tensor(0, x.dtype())).to(DType::Int32)).item<int64_t>() != 0); });

  // Functions taking tensors take NumPy arrays, nested lists and numbers too.
  py::implicitly_convertible<py::array, Tensor>();
  py::implicitly_convertible<py::list, Tensor>();
  py::implicitly_convertible<py::float_, Tensor>();
  py::implicitly_convertible<py::int_, Tensor>();

  m.def("from_numpy", [](py::array a) { return from_numpy(a); }, py::arg("array"),
        "A tensor sharing the NumPy array's memory (a copy when its layout or dtype does not allow).");
  m.def("from_dlpack", &from_dlpack, py::arg("tensor"),
        "A tensor over another library's tensor (torch, NumPy) through DLPack, with no copy.");
  m.def("to_dlpack", &to_dlpack, py::arg("tensor"));
  m.def("tensor", [](py::object data, py::object dtype, bool requires_grad) {
    std::optional<DType> d;
    if (!dtype.is_none()) d = dtype_of(dtype);
    Tensor x = to_tensor(data, d);
    // kiln.tensor always owns its values, as torch.tensor does.
    if (py::isinstance<py::array>(data) || py::isinstance<Tensor>(data)) x = x.detach().clone();
    if (requires_grad) x.set_requires_grad(true);
    return x;
  }, py::arg("data"), py::arg("dtype") = py::none(), py::arg("requires_grad") = false,
        "A new tensor holding a copy of data (NumPy array, numbers, nested lists or a Tensor).");
  // Creation: a dtype (float32 unless given; int64 for randint) and a
  // device ("cpu" unless given: "reference", "cuda:1", a loaded backend's).
  auto dt = [](const py::object& d, DType fallback) { return d.is_none() ? fallback : dtype_of(d); };
  auto dev = [](const py::object& d) { return d.is_none() ? cpu_device() : parse_device(py::cast<std::string>(d)); };
  m.def("zeros", [=](py::object s, py::object d, py::object v) { return zeros(shape_of(s), dt(d, DType::Float32), dev(v)); },
        py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("ones", [=](py::object s, py::object d, py::object v) { return ones(shape_of(s), dt(d, DType::Float32), dev(v)); },
        py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("full", [=](py::object s, double x, py::object d, py::object v) {
    return full(shape_of(s), x, dt(d, DType::Float32), dev(v));
  }, py::arg("shape"), py::arg("fill_value"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("empty", [=](py::object s, py::object d, py::object v) {
    return Tensor::empty(shape_of(s), dt(d, DType::Float32), dev(v));
  }, py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("zeros_like", [](const Tensor& x) { return zeros_like(x); });
  m.def("ones_like", [](const Tensor& x) { return ones_like(x); });
  m.def("arange", [=](double start, py::object end, double step, py::object d, py::object v) {
    if (end.is_none()) return arange(0, start, step, dt(d, DType::Float32), dev(v));
    return arange(start, py::cast<double>(end), step, dt(d, DType::Float32), dev(v));
  }, py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1.0, py::arg("dtype") = py::none(),
        py::arg("device") = py::none(),
        "Values from start (0 with one argument) up to end, step apart; float32 unless dtype says otherwise.");
  m.def("linspace", [=](double a, double b, int64_t n, py::object d, py::object v) {
    return linspace(a, b, n, dt(d, DType::Float32), dev(v));
  }, py::arg("start"), py::arg("end"), py::arg("steps"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("eye", [=](int64_t n, std::optional<int64_t> mm, py::object d, py::object v) {
    return eye(n, mm, dt(d, DType::Float32), dev(v));
  }, py::arg("n"), py::arg("m") = py::none(), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("rand", [=](py::object s, py::object d, py::object v) { return rand(shape_of(s), dt(d, DType::Float32), nullptr, dev(v)); },
        py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("randn", [=](py::object s, py::object d, py::object v) { return randn(shape_of(s), dt(d, DType::Float32), nullptr, dev(v)); },
        py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("randint", [=](int64_t low, int64_t high, py::object s, py::object d, py::object v) {
    return randint(low, high, shape_of(s), dt(d, DType::Int64), nullptr, dev(v));
  }, py::arg("low"), py::arg("high"), py::arg("shape"), py::arg("dtype") = py::none(), py::arg("device") = py::none());
  m.def("manual_seed", [](uint64_t seed) { manual_seed(seed); }, py::arg("seed"),
        "Seeds the default generator (random tensors, dropout, initialisers).");
  m.def("is_grad_enabled", &autograd::grad_enabled);
  m.def("set_grad_enabled", &autograd::set_grad_enabled, py::arg("enabled"));
  m.def("_run_in_compute_dtype", [](DType dtype, const py::function& fn) {
    ComputeDTypeScope scope(dtype);
    return fn();
  }, py::arg("dtype"), py::arg("fn"), "Calls fn() with ops computing in dtype (what Cell.to_float sets).");
  m.def("_run_in_autocast", [](std::optional<DType> dtype, const py::function& fn) {
    AutocastScope scope(dtype);
    return fn();
  }, py::arg("dtype"), py::arg("fn"), "Calls fn() under autocast in dtype (what Cell.set_autocast sets).");
  // `with kiln.amp.autocast(dtype):` holds the scope from __enter__ to __exit__ on one thread.
  struct PyAutocast {
    std::optional<DType> dtype;
    std::unique_ptr<AutocastScope> scope;
  };
  py::class_<PyAutocast>(m, "_Autocast")
      .def(py::init([](std::optional<DType> dtype) {
        AutocastScope check(dtype);  // a dtype autocast cannot take fails at the with line
        return PyAutocast{dtype, nullptr};
      }), py::arg("dtype"))
      .def("__enter__", [](PyAutocast& a) {
        KILN_CHECK(!a.scope, "this autocast scope is entered already; make one per with statement");
        a.scope = std::make_unique<AutocastScope>(a.dtype);
      })
      .def("__exit__", [](PyAutocast& a, py::args) {
        a.scope.reset();
        return false;
      });
  m.def("grad", [](std::vector<Tensor> outputs, std::vector<Tensor> inputs, std::vector<Tensor> grad_outputs,
                   bool retain_graph) {
    py::gil_scoped_release release;
    return autograd::grad(outputs, inputs, grad_outputs, retain_graph);
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = std::vector<Tensor>{},
        py::arg("retain_graph") = false,
        "Gradients of outputs with respect to inputs, without touching .grad.");
}

}  // namespace kiln::python

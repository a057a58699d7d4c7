#pragma once
// The kiln._kiln extension: pybind11 bindings over Kiln's public C++ API.
// Each bind_* function adds one area to the module; the Python package
// (python/kiln) gives them their Pythonic and MindSpore-shaped names.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "kiln/kiln.h"
#include "kiln/migrate.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"
#include "kiln/data/readers.h"
#include "kiln/data/vision.h"

namespace py = pybind11;

namespace kiln::python {

void bind_tensor(py::module_& m);
void bind_ops(py::module_& m);
void bind_nn(py::module_& m);
void bind_train(py::module_& m);
void bind_data(py::module_& m);
void bind_io(py::module_& m);
// Takes kiln.add/sub/mul/div and Tensor's + - * / on two tensors past
// pybind11's dispatcher (fast_arithmetic.cpp); after bind_tensor and bind_ops.
void speed_up_arithmetic(py::module_& m);

// A dtype from a kiln dtype, its name ("float32"), a NumPy dtype or scalar type.
DType dtype_of(py::handle value);
// A shape from an int or a sequence of ints.
Shape shape_of(py::handle value);
// A Tensor from a Tensor (as is), a NumPy array (no copy when its layout
// allows), a Python number or a nested list; converted to `dtype` when given.
Tensor to_tensor(py::handle value, std::optional<DType> dtype = std::nullopt);
// The operand of a binary op whose other operand is `like`: a Python number
// becomes a 0-d tensor of like's dtype (float32 when like is integral and the
// number is not), anything else goes through to_tensor.
Tensor operand(py::handle value, const Tensor& like);
// Python's a / b: integers divide as floats.
Tensor true_divide(const Tensor& a, const Tensor& b);
// A NumPy array over the tensor's memory (a copy for bfloat16 and for
// tensors outside host memory).
py::array to_numpy(const Tensor& t);

}  // namespace kiln::python

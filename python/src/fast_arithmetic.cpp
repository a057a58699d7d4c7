// The arithmetic a Python loop calls most, kiln.add(a, b) and a + b on two
// tensors (and sub, mul, div), entered straight from CPython's fast-call
// convention and number slots. pybind11's dispatcher builds argument
// vectors and looks types up by name on every call, which for small tensors
// cost twice what the op itself does. Any other call (numbers, arrays,
// keywords, Tensor subclasses in operators) goes on to the pybind11 binding.
#include <deque>

#include "bindings.h"

namespace kiln::python {
namespace {

const py::detail::type_info* tensor_info() {
  static const py::detail::type_info* info = py::detail::get_type_info(typeid(Tensor));
  return info;
}

// The Tensor held by a kiln.Tensor object (or an instance of a subclass);
// null for anything else.
const Tensor* tensor_in(PyObject* object) {
  if (!PyObject_TypeCheck(object, tensor_info()->type)) return nullptr;
  py::detail::value_and_holder held = reinterpret_cast<py::detail::instance*>(object)->get_value_and_holder();
  return held && held.holder_constructed() ? static_cast<const Tensor*>(held.value_ptr()) : nullptr;
}

PyObject* to_python(Tensor&& t) {
  auto move = [](const void* p) -> void* { return new Tensor(std::move(*const_cast<Tensor*>(static_cast<const Tensor*>(p)))); };
  return py::detail::type_caster_generic::cast(&t, py::return_value_policy::move, py::handle(), tensor_info(),
                                               nullptr, move)
      .ptr();
}

// Sets the Python error for the exception being handled, as pybind11's
// dispatcher would (kiln.Error and its subclasses included).
PyObject* raise_current() {
  if (!py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators) &&
      !py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
    PyErr_SetString(PyExc_SystemError, "an exception escaped kiln's translators");
  return nullptr;
}

template <Tensor (*Op)(const Tensor&, const Tensor&)>
PyObject* run(const Tensor& a, const Tensor& b) {
  try {
    return to_python(Op(a, b));
  } catch (...) {
    return raise_current();
  }
}

// kiln.add and friends: `self` is the pybind11 function that takes every
// other form of call.
template <Tensor (*Op)(const Tensor&, const Tensor&)>
PyObject* function(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs == 2 && kwnames == nullptr)
    if (const Tensor* a = tensor_in(args[0]))
      if (const Tensor* b = tensor_in(args[1])) return run<Op>(*a, *b);
  return PyObject_Vectorcall(self, args, static_cast<size_t>(nargs), kwnames);
}

// Tensor's number slots. Other operands go to the binding's methods as
// CPython's generic slot would: the left operand's __add__ when it is a
// tensor, then the right one's __radd__ (which that generic slot, seeing
// another function in Tensor's slot, no longer tries itself).
template <Tensor (*Op)(const Tensor&, const Tensor&)>
PyObject* number_slot(PyObject* a, PyObject* b, PyObject* forward, PyObject* reflected) {
  if (const Tensor* x = tensor_in(a))
    if (const Tensor* y = tensor_in(b)) return run<Op>(*x, *y);
  PyTypeObject* type = tensor_info()->type;
  if (PyObject_TypeCheck(a, type)) {
    PyObject* result = PyObject_CallMethodOneArg(a, forward, b);
    if (result != Py_NotImplemented) return result;
    Py_DECREF(result);
  }
  if (PyObject_TypeCheck(b, type)) return PyObject_CallMethodOneArg(b, reflected, a);
  Py_RETURN_NOTIMPLEMENTED;
}

#define KILN_NUMBER_SLOT(SLOT, OP, NAME)                                      \
  PyObject* SLOT(PyObject* a, PyObject* b) {                                  \
    static PyObject* forward = PyUnicode_InternFromString("__" NAME "__");    \
    static PyObject* reflected = PyUnicode_InternFromString("__r" NAME "__"); \
    return number_slot<OP>(a, b, forward, reflected);                         \
  }
KILN_NUMBER_SLOT(add_slot, kiln::add, "add")
KILN_NUMBER_SLOT(sub_slot, kiln::sub, "sub")
KILN_NUMBER_SLOT(mul_slot, kiln::mul, "mul")
KILN_NUMBER_SLOT(div_slot, true_divide, "truediv")  // integers divide as floats, as in Python
#undef KILN_NUMBER_SLOT

template <Tensor (*Op)(const Tensor&, const Tensor&)>
void replace_function(py::module_& m, const char* name, PyMethodDef& def) {
  py::object binding = m.attr(name);
  // help() and the stubs read the binding's signatures.
  static std::deque<std::string> docs;  // CPython keeps pointers to them; a deque does not move them
  docs.push_back(py::str(binding.attr("__doc__")).cast<std::string>());
  def = {name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&function<Op>)),
         METH_FASTCALL | METH_KEYWORDS, docs.back().c_str()};
  py::object fast = py::reinterpret_steal<py::object>(PyCFunction_NewEx(&def, binding.ptr(), m.attr("__name__").ptr()));
  if (!fast) throw py::error_already_set();
  m.attr(name) = fast;
}

}  // namespace

void speed_up_arithmetic(py::module_& m) {
  static PyMethodDef defs[4];  // CPython keeps pointers to them
  replace_function<kiln::add>(m, "add", defs[0]);
  replace_function<kiln::sub>(m, "sub", defs[1]);
  replace_function<kiln::mul>(m, "mul", defs[2]);
  replace_function<kiln::div>(m, "div", defs[3]);
  PyNumberMethods* number = tensor_info()->type->tp_as_number;
  number->nb_add = &add_slot;
  number->nb_subtract = &sub_slot;
  number->nb_multiply = &mul_slot;
  number->nb_true_divide = &div_slot;
}

}  // namespace kiln::python

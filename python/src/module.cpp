// The kiln._kiln extension module: Kiln's C++ errors become kiln.Error
// (a RuntimeError) carrying the same message and the line of the user's
// Python code that made the call.
#include "bindings.h"

#include "kiln/caller_language.h"

#include <frameobject.h>

namespace kiln::python {
namespace {

// "file.py:12": the innermost Python frame outside the kiln package, which is
// the user's line that led to the error.
std::string user_location() {
  PyFrameObject* frame = PyEval_GetFrame();
  if (frame) Py_INCREF(frame);
  std::string where;
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    std::string file = py::cast<std::string>(py::handle(reinterpret_cast<PyObject*>(code)).attr("co_filename"));
    int line = PyFrame_GetLineNumber(frame);
    Py_DECREF(code);
    if (file.find("/kiln/") == std::string::npos || file.find("/tests/") != std::string::npos) {
      where = file + ":" + std::to_string(line);
      Py_DECREF(frame);
      break;
    }
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
  return where;
}

void raise(PyObject* type, const std::exception& e) {
  std::string message = e.what();
  // The C++ API's names in advice ("use kiln::where") are the package's from Python.
  for (size_t at; (at = message.find("kiln::")) != std::string::npos;) message.replace(at, 6, "kiln.");
  std::string where = user_location();
  if (!where.empty() && message.find("(at " + where + ")") == std::string::npos) message += "\n  (at " + where + ")";
  PyErr_SetString(type, message.c_str());
}

}  // namespace
}  // namespace kiln::python

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "Kiln's C++ core; use the kiln package, which wraps it.";
  m.attr("__version__") = KILN_VERSION;
  kiln::set_caller_language(kiln::CallerLanguage::Python);  // errors give their fixes in Python
  static py::exception<kiln::Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<kiln::UnsupportedError> unsupported(m, "UnsupportedError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::UnsupportedError& e) {
      raise(unsupported.ptr(), e);
    } catch (const kiln::Error& e) {
      raise(error.ptr(), e);
    }
  });
  bind_tensor(m);
  bind_ops(m);
  bind_nn(m);
  bind_train(m);
  bind_data(m);
  bind_io(m);
  speed_up_arithmetic(m);
}

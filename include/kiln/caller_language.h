#pragma once
// The language of the program that calls Kiln. An error message's fix is
// written as its reader would write it: `x.to(w.dtype())` for C++,
// `x.astype(w.dtype)` for Python. The Python package says so at import.
namespace kiln {

enum class CallerLanguage { Cpp, Python };

void set_caller_language(CallerLanguage language);
CallerLanguage caller_language();

// `cpp` for a C++ caller, `python` for a Python one.
inline const char* in_caller_language(const char* cpp, const char* python) {
  return caller_language() == CallerLanguage::Python ? python : cpp;
}

}  // namespace kiln

#pragma once
// Loading a backend library (kiln/backend_library.h), for load_op_library:
// a file that exports kiln_backend_library_register is one.
#include <string>

#include "kiln/op_library.h"

namespace kiln::detail {

// Whether the opened library `handle` is a backend library.
bool is_backend_library(void* handle);
// Checks and registers the backend library `handle` (opened from `path`).
// Throws, with nothing registered, when it is refused; the caller closes it then.
OpLibrary load_backend_library(void* handle, const std::string& path);

}  // namespace kiln::detail

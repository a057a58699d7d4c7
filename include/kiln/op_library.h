#pragma once
// Op packages: shared libraries, built outside Kiln against kiln/plugin.h,
// whose ops join the registry at run time with the standing of built-in ones
// (dispatch, autograd, graph mode, export, the runtime, `kiln ops`, profiles).
#include <string>
#include <vector>

namespace kiln {

struct OpLibrary {
  std::string name;  // the package's name (KILN_PLUGIN's first argument)
  std::string path;  // the file, as resolved
  // The ops it defines; for a backend library, those it has kernels for.
  std::vector<std::string> ops;
  // Kernels for backends not there when the package loaded ("cuda: rms_norm
  // float32"): registered, they run once their backend is loaded.
  std::vector<std::string> unused_kernels;
  // The kind of device a backend library (kiln/backend_library.h) brings; "" for an op package.
  std::string device;
};

// Loads the package at `path` and registers its ops; a backend library
// (kiln/backend_library.h) registers its kind of device, backend and kernels. A file that is not a
// package, was built for another plugin ABI, clashes with an op that exists
// or fails its own registration is refused with an error naming the file,
// the op and the fix, and nothing of it stays registered. Loading a file
// again returns what the first load registered. Load packages before other
// threads run ops: the registry is not locked against concurrent calls.
const OpLibrary& load_op_library(const std::string& path);
// Every package loaded so far, in load order.
std::vector<OpLibrary> loaded_op_libraries();
// The package that defined `op`; "" for Kiln's own ops.
std::string op_library_of(const std::string& op);

// Loads the packages KILN_PLUGIN_PATH names: files, or folders whose *.so
// files are loaded in name order, separated by ':'. Returns their names.
std::vector<std::string> load_op_libraries_from_environment();
// Loads every *.so in `dir` in name order; none when it does not exist.
std::vector<std::string> load_op_library_dir(const std::string& dir);

// The version of a custom ONNX domain that a loaded package writes; 0 when
// no package does.
int onnx_domain_version(const std::string& domain);

}  // namespace kiln

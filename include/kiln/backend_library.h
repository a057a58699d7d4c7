#pragma once
// A backend in a shared library of its own: a kind of device Kiln does not
// name (or CUDA's slot, in a build without CUDA), its memory and copies
// (kiln/backend.h) and its kernels, loaded at run time like an op package:
// load_op_library(path), or KILN_PLUGIN_PATH for the CLI and Python. Unlike
// an op package (a C ABI that any Kiln release loads), a backend library is
// C++ built against this Kiln release with the same compiler: it subclasses
// Backend and registers Kernels as Kiln's own backends do.
//
//   class NpuBackend : public kiln::Backend { ... };
//   void npu_add(const std::vector<kiln::Tensor>& in, std::vector<kiln::Tensor>& out, const kiln::Attrs&);
//
//   KILN_BACKEND_LIBRARY(npu, reg) {
//     static NpuBackend backend;
//     reg.backend(backend);
//     reg.kernel("add", {kiln::DType::Float32}, npu_add);
//   }
//
// Registration is staged and checked whole (the release, the kind's name,
// the ops the kernels are for) before anything joins the registry, so a
// refused library leaves nothing behind. Every op without a kernel of the
// library's runs on the CPU, visibly, as on any backend.
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/backend.h"
#include "kiln/registry.h"

namespace kiln {

class BackendRegistration {
 public:
  BackendRegistration(std::string device_name, DeviceType type) : name_(std::move(device_name)), type_(type) {}
  // The kind's name ("npu") and the slot it gets: what its devices' Device::type is.
  const std::string& device_name() const { return name_; }
  DeviceType type() const { return type_; }
  // The backend: one object that lives as long as the process (a static).
  void backend(Backend& b) { backend_ = &b; }
  // A kernel for an op Kiln (or a package loaded before) defines, per dtype
  // of the op's dispatch input.
  void kernel(const std::string& op, std::initializer_list<DType> dtypes, Kernel kernel) {
    for (DType d : dtypes) kernels_.push_back({op, d, kernel});
  }
  // How this backend runs the elementwise ops' formulas (kiln/registry.h):
  // every op with one gets a kernel here for these dtypes.
  void block_runner(BlockRunner runner, std::initializer_list<DType> dtypes) {
    runner_ = runner;
    runner_dtypes_ = dtypes;
  }

  struct StagedKernel {
    std::string op;
    DType dtype;
    Kernel kernel;
  };
  Backend* staged_backend() const { return backend_; }
  const std::vector<StagedKernel>& staged_kernels() const { return kernels_; }
  BlockRunner staged_runner() const { return runner_; }
  const std::vector<DType>& staged_runner_dtypes() const { return runner_dtypes_; }

 private:
  std::string name_;
  DeviceType type_;
  Backend* backend_ = nullptr;
  std::vector<StagedKernel> kernels_;
  BlockRunner runner_ = nullptr;
  std::vector<DType> runner_dtypes_;
};

}  // namespace kiln

#define KILN_BACKEND_LIBRARY_EXPORT extern "C" __attribute__((visibility("default")))
// The entry points: the Kiln release it was built against, the kind of
// device it brings, and its registration.
#define KILN_BACKEND_LIBRARY(NAME, REG)                                                                    \
  static void kiln_backend_library_body(::kiln::BackendRegistration& REG);                                 \
  KILN_BACKEND_LIBRARY_EXPORT const char* kiln_backend_library_release() { return KILN_VERSION; }          \
  KILN_BACKEND_LIBRARY_EXPORT const char* kiln_backend_library_device() { return #NAME; }                  \
  KILN_BACKEND_LIBRARY_EXPORT void kiln_backend_library_register(::kiln::BackendRegistration& reg) {       \
    kiln_backend_library_body(reg);                                                                        \
  }                                                                                                        \
  static void kiln_backend_library_body(::kiln::BackendRegistration& REG)

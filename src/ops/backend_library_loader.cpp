// Backend libraries: the release they were built against, the kind of device
// they bring and the ops their kernels are for are checked with the
// registration staged, and only then do the kind, the backend and its
// kernels join Kiln.
#include "ops/backend_library_loader.h"

#include <dlfcn.h>

#include <algorithm>

#include "kiln/backend_library.h"

namespace kiln::detail {
namespace {

using ReleaseFn = const char* (*)();
using DeviceFn = const char* (*)();
using RegisterFn = void (*)(BackendRegistration&);

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

// The slot the kind `name` would take: its own when Kiln names it (and has
// no backend there yet), else the first free one.
DeviceType slot_for(const std::string& name, const std::string& path) {
  const std::vector<DeviceType> named = device_types();
  for (DeviceType t : named) {
    if (name != device_type_name(t)) continue;
    KILN_CHECK(!find_backend(t), "backend library ", path, " brings device kind '", name,
               "', which this process already has a backend for; load one backend library per kind of device");
    return t;
  }
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    const auto t = static_cast<DeviceType>(i);
    if (std::find(named.begin(), named.end(), t) == named.end()) return t;
  }
  KILN_FAIL("backend library ", path, " brings device kind '", name, "', but all ", kNumDeviceTypes,
            " device slots are taken");
}

}  // namespace

bool is_backend_library(void* handle) { return dlsym(handle, "kiln_backend_library_register") != nullptr; }

OpLibrary load_backend_library(void* handle, const std::string& path) {
  auto release = symbol<ReleaseFn>(handle, "kiln_backend_library_release");
  auto device = symbol<DeviceFn>(handle, "kiln_backend_library_device");
  auto reg = symbol<RegisterFn>(handle, "kiln_backend_library_register");
  KILN_CHECK(release && device && reg, "backend library ", path,
             " lacks its entry points (KILN_BACKEND_LIBRARY from kiln/backend_library.h defines them)");
  const std::string built_for = release() ? release() : "";
  KILN_CHECK(built_for == KILN_VERSION, "backend library ", path, " was built against Kiln ", built_for,
             "; this is Kiln ", KILN_VERSION,
             ". A backend library is C++ against one release: rebuild it against this Kiln (find_package(Kiln))");
  const std::string name = device() ? device() : "";
  KILN_CHECK(valid_device_kind_name(name), "backend library ", path, " names its device kind '", name,
             "'; a device kind is a lowercase identifier (as in npu)");
  const DeviceType type = slot_for(name, path);

  BackendRegistration staged(name, type);
  try {
    reg(staged);
  } catch (const std::exception& e) {
    KILN_FAIL("backend library ", path, " (device ", name, ") failed its registration, so nothing of it was registered: ",
              e.what());
  }
  KILN_CHECK(staged.staged_backend(), "backend library ", path, " (device ", name,
             ") registered no backend; its registration calls reg.backend(b) with its Backend");
  const OpRegistry& ops = OpRegistry::instance();
  for (const auto& k : staged.staged_kernels()) {
    KILN_CHECK(ops.find(k.op), "backend library ", path, " (device ", name, ") registers a kernel for op '", k.op,
               "', which is not defined; load the op package that defines it first (`kiln ops` lists the ops)");
    KILN_CHECK(k.kernel.fn, "backend library ", path, " (device ", name, ") registers a null kernel for op '", k.op,
               "'");
  }

  // Nothing below can fail: the kind, its backend, its kernels, its runner.
  const DeviceType taken = register_device_type(name);
  KILN_ASSERT(taken == type, "device kind '", name, "' took slot ", static_cast<int>(taken), ", not ",
              static_cast<int>(type));
  register_backend(type, staged.staged_backend());
  OpLibrary lib{name, path, {}, {}, name};
  for (const auto& k : staged.staged_kernels()) {
    OpRegistry::instance().register_kernel(k.op, type, k.dtype, k.kernel);
    if (lib.ops.empty() || lib.ops.back() != k.op) lib.ops.push_back(k.op);
  }
  // A transfer's kernel is copy_between, which reaches every backend's memory
  // through that backend: the CPU's kernel serves the new kind as it is.
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (!op->has_tag(kTagTransfer)) continue;
    for (DType d : op->dtypes(DeviceType::CPU))
      OpRegistry::instance().register_kernel(op->name, type, d, op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(d)]);
  }
  if (staged.staged_runner())
    OpRegistry::instance().register_block_runner(type, staged.staged_runner(), staged.staged_runner_dtypes());
  return lib;
}

}  // namespace kiln::detail

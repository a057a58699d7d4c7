// NVRTC with a disk cache, and the driver API's module calls (runtime_compiler.h).
#include "backends/cuda/runtime_compiler.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

#include "backends/cuda/on_device.h"
#include "kiln/error.h"

namespace kiln::cuda {
namespace {

std::atomic<int64_t> compiled_count{0}, from_disk_count{0};

// FNV-1a over the bytes: the cache's file names. A hit is also checked
// against the stored source, so a collision only costs a compilation.
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

void check_nvrtc(nvrtcResult status, const char* what) {
  if (status != NVRTC_SUCCESS) KILN_FAIL("NVRTC: ", what, " failed: ", nvrtcGetErrorString(status));
}

std::vector<int> nvrtc_architectures() {
  int n = 0;
  check_nvrtc(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(n));
  check_nvrtc(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check_nvrtc(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Written beside, then renamed: a reader sees the whole file or none. A cache
// that cannot be written is not an error; the kernel was compiled anyway.
void write_file(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path temporary = path.string() + ".tmp" + std::to_string(getpid());
  {
    std::ofstream out(temporary, std::ios::binary);
    if (!out) return;
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return;
  }
  std::error_code ignored;
  std::filesystem::rename(temporary, path, ignored);
  if (ignored) std::filesystem::remove(temporary, ignored);
}

std::string compile(const std::string& source, const std::string& name, RuntimeTarget target) {
  nvrtcProgram program = nullptr;
  check_nvrtc(nvrtcCreateProgram(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr),
              "nvrtcCreateProgram");
  const std::string arch =
      std::string("--gpu-architecture=") + (target.ptx ? "compute_" : "sm_") + std::to_string(target.arch);
  const char* options[] = {arch.c_str(), "-std=c++17", "--diag-suppress=177"};
  const nvrtcResult status = nvrtcCompileProgram(program, 3, options);
  std::string image;
  if (status == NVRTC_SUCCESS) {
    size_t size = 0;
    if (target.ptx) {
      check_nvrtc(nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize");
      image.resize(size);
      check_nvrtc(nvrtcGetPTX(program, image.data()), "nvrtcGetPTX");
    } else {
      check_nvrtc(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
      image.resize(size);
      check_nvrtc(nvrtcGetCUBIN(program, image.data()), "nvrtcGetCUBIN");
    }
  } else {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();  // (the size counts the NUL)
    nvrtcDestroyProgram(&program);
    KILN_FAIL("NVRTC could not compile the generated kernel '", name, "' for ", arch, ": ", nvrtcGetErrorString(status),
              "\n", log, "\nThis is a bug in Kiln's kernel generator; KILN_CUDA_FUSION=0 runs the graph without ",
              "generated kernels meanwhile");
  }
  nvrtcDestroyProgram(&program);
  ++compiled_count;
  return image;
}

// The driver API, opened where it is first needed.
struct Driver {
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                            void**, void**) = nullptr;
  CUresult (*error_string)(CUresult, const char**) = nullptr;

  std::string why(CUresult status) const {
    const char* text = nullptr;
    if (error_string) error_string(status, &text);
    return text ? text : "error " + std::to_string(static_cast<int>(status));
  }
};

const Driver& driver() {
  static const Driver d = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    KILN_CHECK(lib != nullptr, "CUDA: the driver library libcuda.so.1 did not open (", dlerror(),
               "); run-time compiled kernels need the NVIDIA driver");
    auto find = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      KILN_CHECK(fn != nullptr, "CUDA: the driver library has no ", name, "; update the NVIDIA driver");
    };
    find(d.module_load_data, "cuModuleLoadData");
    find(d.module_get_function, "cuModuleGetFunction");
    find(d.launch_kernel, "cuLaunchKernel");
    find(d.error_string, "cuGetErrorString");
    return d;
  }();
  return d;
}

}  // namespace

RuntimeTarget runtime_target(int device) {
  int major = 0, minor = 0;
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "cudaDeviceGetAttribute");
  const int arch = major * 10 + minor;
  int best = 0;
  for (int known : nvrtc_architectures()) {
    if (known == arch) return {arch, false};
    if (known < arch && known > best) best = known;
  }
  KILN_CHECK(best > 0, "NVRTC ", nvrtc_version(), " knows no architecture up to the device's sm_", arch,
             "; install a CUDA toolkit that does");
  return {best, true};
}

std::string kernel_cache_folder() {
  if (const char* own = std::getenv("KILN_KERNEL_CACHE")) return std::string(own) == "off" ? "" : own;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln/cuda-kernels";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln/cuda-kernels";
  return "";
}

std::string compile_runtime_source(const std::string& source, const std::string& name, RuntimeTarget target) {
  const std::string folder = kernel_cache_folder();
  // The key covers what changes the image: the source, the target and the compiler.
  const std::string what =
      (target.ptx ? "compute_" : "sm_") + std::to_string(target.arch) + " nvrtc " + nvrtc_version();
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(fnv1a(source, fnv1a(what))));
  const std::filesystem::path base = folder.empty() ? std::filesystem::path() : std::filesystem::path(folder) / key;
  const std::string image_suffix = target.ptx ? ".ptx" : ".cubin";
  if (!folder.empty() && read_file(base.string() + ".cu") == what + "\n" + source) {
    std::string image = read_file(base.string() + image_suffix);
    if (!image.empty()) {
      ++from_disk_count;
      return image;
    }
  }
  std::string image = compile(source, name, target);
  if (!folder.empty()) {
    std::error_code ignored;
    std::filesystem::create_directories(folder, ignored);
    write_file(base.string() + image_suffix, image);  // the image first: a source on disk means its image is there
    write_file(base.string() + ".cu", what + "\n" + source);
  }
  return image;
}

RuntimeCompileCounts runtime_compile_counts() { return {compiled_count.load(), from_disk_count.load()}; }

void* runtime_kernel(int device, const std::string& source, const char* entry) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, CUfunction> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find({device, source});
  if (it != loaded.end()) return it->second;
  OnDevice on(device);
  check(cudaFree(nullptr), "cudaFree");  // makes the device's primary context current for the driver's calls
  const std::string image = compile_runtime_source(source, entry, runtime_target(device));
  const Driver& d = driver();
  CUmodule module = nullptr;
  CUresult status = d.module_load_data(&module, image.data());
  KILN_CHECK(status == CUDA_SUCCESS, "CUDA: a run-time compiled module did not load: ", d.why(status));
  CUfunction function = nullptr;
  status = d.module_get_function(&function, module, entry);
  KILN_CHECK(status == CUDA_SUCCESS, "CUDA: no function ", entry, " in a run-time compiled module: ", d.why(status));
  loaded[{device, source}] = function;  // modules stay loaded for the process, as the library's own kernels do
  return function;
}

void launch_runtime_kernel(void* function, unsigned blocks, unsigned threads, void* stream, void** params,
                           const std::string& what) {
  const Driver& d = driver();
  const CUresult status = d.launch_kernel(static_cast<CUfunction>(function), blocks, 1, 1, threads, 1, 1, 0,
                                          static_cast<CUstream>(stream), params, nullptr);
  KILN_CHECK(status == CUDA_SUCCESS, "CUDA: the ", what, " kernel did not launch: ", d.why(status));
}

}  // namespace kiln::cuda

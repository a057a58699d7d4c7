// Loading op packages: the file is opened, its ABI version checked, its
// registration function run against a staging area, every definition checked,
// and only then are its ops and kernels added to the registry, so a refused
// package leaves nothing behind.
#include "kiln/op_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <utility>

#include "kiln/backend.h"
#include "kiln/registry.h"
#include "ops/backend_library_loader.h"
#include "ops/elementwise_math.h"
#include "ops/plugin_host.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using plugin_host::Status;

struct KernelSlot {
  kiln_kernel_fn fn = nullptr;
  void* user = nullptr;
  std::string where;  // "op 'rms_norm' of package custom_ops (/path/libcustom_ops.so)"
};
struct MathSlot {
  kiln_math_f32 f32 = nullptr;
  kiln_math_f64 f64 = nullptr;
  ElementwiseMath math;
};

// Kernel entry points are plain function pointers, so each package kernel
// gets a compiled-in trampoline that knows its slot.
constexpr int kKernelSlots = 512;
constexpr int kMathSlots = 128;
KernelSlot kernel_slots[kKernelSlots];
MathSlot math_slots[kMathSlots];
int kernel_slots_used = 0, math_slots_used = 0;

void run_package_kernel(const KernelSlot& slot, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                        const Attrs& attrs) {
  plugin_host::Handles ins(in), outs(out);
  Status status;
  int rc = slot.fn(ins.data(), ins.size(), outs.data(), outs.size(), plugin_host::handle(attrs), slot.user,
                   status.get());
  KILN_CHECK(rc == KILN_OK, "the kernel of ", slot.where, " failed: ",
             status.message.empty() ? "(it gave no message)" : status.message);
}

template <int I>
void kernel_trampoline(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  run_package_kernel(kernel_slots[I], in, out, attrs);
}
template <int I>
void math_f32_trampoline(const float* const* in, float* out, int64_t n, const Attrs& attrs) {
  math_slots[I].f32(in, out, n, plugin_host::handle(attrs));
}
template <int I>
void math_f64_trampoline(const double* const* in, double* out, int64_t n, const Attrs& attrs) {
  math_slots[I].f64(in, out, n, plugin_host::handle(attrs));
}
template <int I>
void math_kernel_trampoline(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  detail::run_math(math_slots[I].math, in, out, attrs);
}

template <int... I>
constexpr std::array<KernelFn, sizeof...(I)> kernel_table(std::integer_sequence<int, I...>) {
  return {&kernel_trampoline<I>...};
}
template <int... I>
constexpr std::array<ElementwiseMath, sizeof...(I)> math_table(std::integer_sequence<int, I...>) {
  return {ElementwiseMath{0, &math_f32_trampoline<I>, &math_f64_trampoline<I>, &math_kernel_trampoline<I>}...};
}
const auto kKernelTrampolines = kernel_table(std::make_integer_sequence<int, kKernelSlots>());
const auto kMathTrampolines = math_table(std::make_integer_sequence<int, kMathSlots>());

struct StagedKernel {
  std::string op;
  DeviceType backend;
  DType dtype;
  kiln_kernel_fn fn;
  void* user;
};

// A package's load in progress: what its registration function submitted.
struct Load {
  std::string path, package;
  std::vector<OpDef> ops;
  std::map<std::string, const kiln_op_def*> raw;  // op -> the package's definition, while registering
  std::vector<StagedKernel> kernels;
  std::vector<std::string> unused_kernels;
  std::map<std::string, int> domains;
  std::string error;  // the first refusal, even if the package ignored the return code
  std::string where(const std::string& op) const {
    return detail::concat("op '", op, "' of package ", package, " (", path, ")");
  }
};

std::mutex mutex;
std::vector<OpLibrary>& libraries() {
  static std::vector<OpLibrary> v;
  return v;
}
std::map<std::string, std::string>& op_owner() {  // op -> package
  static std::map<std::string, std::string> m;
  return m;
}
std::map<std::string, int>& domain_versions() {
  static std::map<std::string, int> m;
  return m;
}

bool identifier(const std::string& s) { return std::regex_match(s, std::regex("[a-z][a-z0-9_]*")); }

std::string who_defines(const std::string& op) {
  auto it = op_owner().find(op);
  return it == op_owner().end() ? std::string("Kiln itself") : detail::concat("package ", it->second);
}

std::string shape_text(const TensorMeta& m) {
  if (!m.defined) return "(omitted)";
  std::string dims;
  for (size_t i = 0; i < m.shape.size(); ++i) dims += detail::concat(i ? "," : "", m.shape[i]);
  return detail::concat(dtype_name(m.dtype), "[", dims, "]");
}

InferFn package_infer(const kiln_op_def& d, const std::string& where) {
  const int32_t n_out = d.n_outputs;
  return [fn = d.infer, user = d.infer_user, n_out, where](const std::vector<TensorMeta>& in, const Attrs& attrs) {
    std::vector<kiln_meta> metas;
    Device device;
    bool seen = false;
    for (const TensorMeta& m : in) {
      metas.push_back({m.defined ? 1 : 0, static_cast<int32_t>(m.dtype), static_cast<int32_t>(m.shape.size()),
                       m.shape.data()});
      if (m.defined && !seen) device = m.device, seen = true;
    }
    std::vector<kiln_meta_out> out(static_cast<size_t>(n_out));
    for (auto& o : out) o.ndim = -1;
    Status status;
    int rc = fn(metas.data(), static_cast<int32_t>(metas.size()), plugin_host::handle(attrs), out.data(), n_out, user,
                status.get());
    std::string inputs;
    for (const TensorMeta& m : in) inputs += detail::concat(inputs.empty() ? "" : ", ", shape_text(m));
    KILN_CHECK(rc == KILN_OK, "the inference function of ", where, " refused inputs ", inputs, " with attributes {",
               attrs.str(), "}: ", status.message.empty() ? "(it gave no message)" : status.message,
               ". If these inputs are valid for the op, fix the inference function in the package");
    std::vector<TensorMeta> result;
    for (int32_t i = 0; i < n_out; ++i) {
      const kiln_meta_out& o = out[static_cast<size_t>(i)];
      KILN_CHECK(o.ndim >= 0 && o.ndim <= KILN_PLUGIN_MAX_DIMS, "the inference function of ", where,
                 " set no shape for output ", i, " (inputs ", inputs, "); it must set every output");
      KILN_CHECK(plugin_host::valid_dtype(o.dtype), "the inference function of ", where, " gave output ", i,
                 " dtype ", o.dtype, ", which is not a Kiln dtype (KILN_FLOAT32 to KILN_INT8)");
      for (int32_t k = 0; k < o.ndim; ++k)
        KILN_CHECK(o.shape[k] >= 0, "the inference function of ", where, " gave output ", i, " a negative size");
      result.push_back({true, Shape(o.shape, o.shape + o.ndim), static_cast<DType>(o.dtype), device});
    }
    return result;
  };
}

GradFn package_grad(const kiln_op_def& d, const std::string& where) {
  return [fn = d.grad, user = d.grad_user, where](const GradContext& c, const std::vector<Tensor>& grads) {
    plugin_host::Handles inputs(c.inputs), outputs(c.outputs), upstream(grads);
    std::vector<int32_t> needs;
    for (bool b : c.needs_grad) needs.push_back(b ? 1 : 0);
    std::vector<kiln_tensor*> result(c.inputs.size(), nullptr);
    kiln_grad_args args{inputs.data(),  inputs.size(), outputs.data(), outputs.size(), upstream.data(),
                        needs.data(),   plugin_host::handle(c.attrs), result.data()};
    Status status;
    int rc = fn(&args, user, status.get());
    std::vector<Tensor> out;
    for (kiln_tensor* h : result) {
      out.push_back(h ? plugin_host::tensor(h) : Tensor());
      plugin_host::release(h);
    }
    KILN_CHECK(rc == KILN_OK, "the gradient rule of ", where, " failed: ",
               status.message.empty() ? "(it gave no message)" : status.message);
    return out;
  };
}

// The op as one node of its custom ONNX domain, attributes passed through.
void give_onnx(OpDef& op, const std::string& type) {
  op.onnx.types = {type};
  op.onnx.write = [type](OnnxWriter& w) { w.node(type, w.inputs(), w.outputs(), w.attrs()); };
  op.onnx_import = onnx_reader({type}, [name = op.name, specs = op.attr_specs](const OnnxReader& n,
                                                                                const std::vector<Tensor>& in) {
    Attrs a;
    for (const auto& s : specs) {
      if (!n.has(s.name)) continue;
      if (s.kind == "int") a.set(s.name, n.i(s.name, 0));
      else if (s.kind == "float") a.set(s.name, n.f(s.name, 0));
      else if (s.kind == "bool") a.set(s.name, n.i(s.name, 0) != 0);
      else if (s.kind == "string") a.set(s.name, n.s(s.name, ""));
      else if (s.kind == "ints") a.set(s.name, n.ints(s.name));
      else if (s.kind == "floats") a.set(s.name, n.floats(s.name));
      else if (s.kind == "dtype") a.set(s.name, n.dtype(s.name));
      else n.unsupported("attribute '", s.name, "' of op '", name, "' declares no kind, so it cannot be read from ONNX");
    }
    return call(name, in, a);
  });
}

std::vector<std::string> strings(const char* const* v, int32_t n, const char* what, const std::string& where) {
  KILN_CHECK(n >= 0 && (n == 0 || v), where, ": ", what, " has ", n, " entries and no array");
  std::vector<std::string> out;
  for (int32_t i = 0; i < n; ++i) {
    KILN_CHECK(v[i] && *v[i], where, ": ", what, " entry ", i, " is empty");
    out.emplace_back(v[i]);
  }
  return out;
}

// Builds an OpDef from a package's definition, or throws saying what is wrong.
OpDef stage_op(Load& load, const kiln_op_def* d) {
  KILN_CHECK(d && d->struct_size >= sizeof(kiln_op_def), "package ", load.package, " (", load.path,
             ") defines an op with a kiln_op_def of ", d ? d->struct_size : 0, " bytes; plugin ABI ",
             KILN_PLUGIN_ABI_VERSION, " needs ", sizeof(kiln_op_def), ". Rebuild the package against this Kiln");
  const std::string name = d->name ? d->name : "";
  const std::string where = load.where(name);
  KILN_CHECK(identifier(name), "package ", load.package, " (", load.path, ") defines an op named '", name,
             "'; op names are lowercase identifiers ([a-z][a-z0-9_]*)");
  KILN_CHECK(!OpRegistry::instance().find(name), where, " clashes with the op of that name defined by ",
             who_defines(name), "; rename the package's op (a prefix such as '", load.package, "_' avoids clashes)");
  KILN_CHECK(!load.raw.count(name), where, " is defined twice by the package");
  KILN_CHECK(d->infer, where, " has no inference function; every op says its outputs' shapes and dtypes");
  KILN_CHECK(d->n_outputs >= 1, where, " declares no outputs");
  OpDef op;
  op.name = name;
  op.inputs = strings(d->inputs, d->n_inputs, "inputs", where);
  op.outputs = strings(d->outputs, d->n_outputs, "outputs", where);
  op.attrs = strings(d->attrs, d->n_attrs, "attrs", where);
  static const std::set<std::string> kinds = {"int", "ints", "float", "floats", "bool", "string", "dtype"};
  for (const auto& text : op.attrs) {
    size_t colon = text.find(':');
    std::string kind = colon == std::string::npos ? "" : text.substr(colon + 1, text.find_first_of("=? ", colon) - colon - 1);
    KILN_CHECK(colon != std::string::npos && kinds.count(kind), where, " declares attribute '", text,
               "'; write it as name:kind=default with kind int, ints, float, floats, bool, string or dtype");
    op.attr_specs.push_back({text.substr(0, colon), kind});
  }
  const uint32_t known = KILN_TAG_ELEMENTWISE | KILN_TAG_REDUCTION | KILN_TAG_NONDIFFERENTIABLE | KILN_TAG_FUSIBLE |
                         KILN_TAG_BACKWARD | KILN_TAG_LOSS;
  KILN_CHECK((d->tags & ~known) == 0, where, " has tags ", d->tags,
             ", some of which a package cannot set; use KILN_TAG_ELEMENTWISE, _REDUCTION, _NONDIFFERENTIABLE, _FUSIBLE, "
             "_BACKWARD or _LOSS");
  op.tags = d->tags;
  if (d->category) op.category = d->category;
  op.infer = package_infer(*d, where);
  if (d->grad) op.grad = package_grad(*d, where);
  for (int32_t i = 0; i < d->n_differentiable_inputs; ++i) {
    KILN_CHECK(d->differentiable_inputs[i] >= 0 && d->differentiable_inputs[i] < d->n_inputs, where,
               " names differentiable input ", d->differentiable_inputs[i], ", which it does not have");
    op.differentiable_inputs.push_back(d->differentiable_inputs[i]);
  }
  if (d->tags & KILN_TAG_ELEMENTWISE) {
    KILN_CHECK(d->math_f32 && d->math_f64 && d->math_arity == d->n_inputs && d->n_outputs == 1, where,
               " is tagged elementwise, which needs math_f32, math_f64 and math_arity equal to its ", d->n_inputs,
               " inputs, and one output (kiln::plugin's OpBuilder::elementwise sets them)");
    KILN_CHECK(math_slots_used < kMathSlots, where, ": this process holds at most ", kMathSlots,
               " elementwise package ops");
    MathSlot& slot = math_slots[math_slots_used];
    slot.f32 = d->math_f32;
    slot.f64 = d->math_f64;
    slot.math = kMathTrampolines[static_cast<size_t>(math_slots_used)];
    slot.math.arity = d->math_arity;
    op.math = slot.math;
    ++math_slots_used;  // a refused load leaves the slot used but unreachable
  }
  if (d->onnx_domain || d->onnx_type) {
    const std::string domain = d->onnx_domain ? d->onnx_domain : "", type = d->onnx_type ? d->onnx_type : "";
    KILN_CHECK(!domain.empty() && domain != "ai.onnx" && !type.empty(), where, " maps to ONNX type '", type,
               "' in domain '", domain,
               "'; a package's ops go in a domain of its own (like com.example), never ONNX's default one");
    KILN_CHECK(d->onnx_domain_version >= 1, where, " gives ONNX domain ", domain, " version ",
               d->onnx_domain_version, "; versions start at 1");
    auto known_version = domain_versions().find(domain);
    int version = known_version != domain_versions().end() ? known_version->second : 0;
    if (load.domains.count(domain)) version = load.domains[domain];
    KILN_CHECK(version == 0 || version == d->onnx_domain_version, where, " writes ONNX domain ", domain,
               " version ", d->onnx_domain_version, ", which is already written as version ", version);
    load.domains[domain] = d->onnx_domain_version;
    const std::string qualified = domain + "::" + type;
    for (const OpDef* other : OpRegistry::instance().all())
      for (const auto& t : other->onnx_import.types)
        KILN_CHECK(t != qualified, where, " reads ONNX ", qualified, ", which op '", other->name, "' already reads");
    give_onnx(op, qualified);
  }
  load.raw[name] = d;
  return op;
}

DeviceType backend_named(const std::string& name, bool* known) {
  for (DeviceType t : device_types()) {
    if (name == device_type_name(t)) {
      *known = true;
      return t;
    }
  }
  *known = false;
  return DeviceType::CPU;
}

int define_op(kiln_registrar* r, const kiln_op_def* d) {
  Load& load = *reinterpret_cast<Load*>(r);
  try {
    load.ops.push_back(stage_op(load, d));
    return KILN_OK;
  } catch (const std::exception& e) {
    if (load.error.empty()) load.error = e.what();
    plugin_host::set_last_error(e.what());
    return KILN_ERROR;
  }
}

int register_kernel(kiln_registrar* r, const char* op_name, const char* backend, int32_t dtype, kiln_kernel_fn fn,
                    void* user) {
  Load& load = *reinterpret_cast<Load*>(r);
  try {
    const std::string op = op_name ? op_name : "";
    const std::string where = load.where(op);
    KILN_CHECK(load.raw.count(op), "package ", load.package, " (", load.path, ") registers a kernel for op '", op,
               "', which it does not define (define the op before its kernels; a package adds kernels to its own "
               "ops only)");
    KILN_CHECK(plugin_host::valid_dtype(dtype), where, " registers a kernel for dtype ", dtype,
               ", which is not a Kiln dtype; use KILN_FLOAT32 (0) to KILN_INT8 (8) (kiln::plugin::DType)");
    KILN_CHECK(fn, where, " registers a null kernel");
    const std::string b = backend ? backend : "";
    bool known = false;
    DeviceType type = backend_named(b, &known);
    KILN_CHECK(known, where, " registers a kernel for backend '", b, "', which is no kind of device of this process; ",
               "Kiln's are cpu, cuda and reference, and a backend library loaded before the package adds its own");
    // A backend not loaded yet (the CUDA library loads when a CUDA device is
    // first asked for, which cannot happen during this load): its kernels
    // are registered all the same, reported, and run once it is there.
    if (!find_backend(type))
      load.unused_kernels.push_back(detail::concat(b, ": ", op, " ", dtype_name(static_cast<DType>(dtype))));
    load.kernels.push_back({op, type, static_cast<DType>(dtype), fn, user});
    return KILN_OK;
  } catch (const std::exception& e) {
    if (load.error.empty()) load.error = e.what();
    plugin_host::set_last_error(e.what());
    return KILN_ERROR;
  }
}

const kiln_host_api& host_api() {
  static const kiln_host_api api = [] {
    kiln_host_api a = plugin_host::base_api();
    a.define_op = define_op;
    a.register_kernel = register_kernel;
    return a;
  }();
  return api;
}

// Adds a checked load to the registry; nothing here can fail but the
// trampoline count, which is checked first.
OpLibrary commit(Load& load) {
  KILN_CHECK(kernel_slots_used + static_cast<int>(load.kernels.size()) <= kKernelSlots, "package ", load.package,
             " (", load.path, ") has ", load.kernels.size(), " kernels; this process holds at most ", kKernelSlots,
             " package kernels and ", kernel_slots_used, " are taken");
  OpLibrary lib{load.package, load.path, {}, load.unused_kernels, ""};
  for (OpDef& op : load.ops) {
    lib.ops.push_back(op.name);
    op_owner()[op.name] = load.package;
    OpRegistry::instance().define(std::move(op));
  }
  for (const StagedKernel& k : load.kernels) {
    KernelSlot& slot = kernel_slots[kernel_slots_used];
    slot = {k.fn, k.user, load.where(k.op)};
    OpRegistry::instance().register_kernel(k.op, k.backend, k.dtype,
                                           kKernelTrampolines[static_cast<size_t>(kernel_slots_used++)]);
  }
  for (const auto& [domain, version] : load.domains) domain_versions()[domain] = version;
  return lib;
}

template <typename Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

}  // namespace

namespace {

thread_local bool t_in_load = false;  // this thread holds `mutex`, loading a library

struct InLoad {
  InLoad() { t_in_load = true; }
  ~InLoad() { t_in_load = false; }
};

// The folder backend libraries are looked for in: KILN_BACKEND_PATH, else
// libkiln's own.
fs::path backend_library_dir() {
  if (const char* env = std::getenv("KILN_BACKEND_PATH")) return env;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_op_library), &info) == 0 || info.dli_fname == nullptr) return {};
  return fs::path(info.dli_fname).parent_path();
}

// find_backend's loader (kiln/backend.h): libkiln_<kind>.so where libkiln is.
bool load_backend_beside_kiln(DeviceType type, std::string* why) {
  if (t_in_load) return false;  // (asked while a library loads: try again later)
  const fs::path dir = backend_library_dir();
  if (dir.empty()) return true;
  const fs::path file = dir / ("libkiln_" + std::string(device_type_name(type)) + ".so");
  std::error_code ec;
  if (!fs::exists(file, ec)) return true;
  try {
    load_op_library(file.string());
  } catch (const Error& e) {
    *why = file.string() + " is there but did not load: " + e.what();
  }
  return true;
}

[[maybe_unused]] const bool backend_loader_set = (detail::set_backend_loader(load_backend_beside_kiln), true);

}  // namespace

const OpLibrary& load_op_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(mutex);
  InLoad in_load;
  std::error_code ec;
  KILN_CHECK(fs::is_regular_file(path, ec), "op package ", path,
             ": no such file (give the path of the shared library that kiln_add_op_library built)");
  const std::string real = fs::canonical(path).string();
  for (const OpLibrary& lib : libraries())
    if (lib.path == real) return lib;

  void* handle = dlopen(real.c_str(), RTLD_NOW | RTLD_LOCAL);
  const char* dl_error = handle ? nullptr : dlerror();
  KILN_CHECK(handle, "op package ", real, " cannot be loaded: ", dl_error ? dl_error : "unknown reason",
             ". It must be a shared library for this machine whose dependencies are found");
  auto refuse = [&](const auto&... parts) {
    dlclose(handle);
    KILN_FAIL(parts...);
  };
  if (detail::is_backend_library(handle)) {
    try {
      libraries().push_back(detail::load_backend_library(handle, real));
    } catch (const std::exception& e) {
      refuse(e.what());
    }
    return libraries().back();
  }
  auto abi = symbol<kiln_plugin_abi_version_fn>(handle, KILN_PLUGIN_ABI_SYMBOL);
  auto name_fn = symbol<kiln_plugin_name_fn>(handle, KILN_PLUGIN_NAME_SYMBOL);
  auto reg = symbol<kiln_plugin_register_fn>(handle, KILN_PLUGIN_REGISTER_SYMBOL);
  if (!abi || !name_fn || !reg)
    refuse("op package ", real, " is not a Kiln op package: it lacks the symbol ",
           !abi ? KILN_PLUGIN_ABI_SYMBOL : !name_fn ? KILN_PLUGIN_NAME_SYMBOL : KILN_PLUGIN_REGISTER_SYMBOL,
           " (KILN_PLUGIN from kiln/plugin.h defines the entry points)");
  const uint32_t version = abi();
  if (version != KILN_PLUGIN_ABI_VERSION)
    refuse("op package ", real, " was built for plugin ABI version ", version, "; Kiln ", KILN_VERSION,
           " loads plugin ABI version ", KILN_PLUGIN_ABI_VERSION,
           ". Rebuild the package against this Kiln's headers (find_package(Kiln))");
  const char* raw_name = name_fn();
  Load load;
  load.path = real;
  load.package = raw_name ? raw_name : "";
  if (!identifier(load.package))
    refuse("op package ", real, " is named '", load.package, "'; package names are lowercase identifiers");
  for (const OpLibrary& lib : libraries())
    if (lib.name == load.package)
      refuse("op package ", real, " is named ", load.package, ", like the package already loaded from ", lib.path,
             "; one process loads one package of a name");

  Status status;
  int rc = KILN_ERROR;
  try {
    rc = reg(&host_api(), reinterpret_cast<kiln_registrar*>(&load), status.get());
  } catch (...) {
    status.message = "an exception left its registration function";
  }
  if (rc != KILN_OK || !load.error.empty()) {
    const std::string why =
        !load.error.empty() ? load.error : status.message.empty() ? "it gave no reason" : status.message;
    refuse("op package ", real, " (package ", load.package,
           ") failed its registration, so none of its ops were registered: ", why);
  }
  try {
    libraries().push_back(commit(load));
  } catch (const std::exception& e) {
    refuse(e.what());
  }
  return libraries().back();
}

std::vector<OpLibrary> loaded_op_libraries() {
  std::lock_guard<std::mutex> lock(mutex);
  return libraries();
}

std::string op_library_of(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = op_owner().find(op);
  return it == op_owner().end() ? "" : it->second;
}

int onnx_domain_version(const std::string& domain) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = domain_versions().find(domain);
  return it == domain_versions().end() ? 0 : it->second;
}

std::vector<std::string> load_op_library_dir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".so") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) names.push_back(load_op_library(f.string()).name);
  return names;
}

std::vector<std::string> load_op_libraries_from_environment() {
  std::vector<std::string> names;
  const char* env = std::getenv("KILN_PLUGIN_PATH");
  if (!env) return names;
  std::string list = env;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    std::string entry = list.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? list.size() + 1 : end + 1;
    if (entry.empty()) continue;
    std::error_code ec;
    if (fs::is_directory(entry, ec)) {
      for (auto& n : load_op_library_dir(entry)) names.push_back(n);
    } else {
      KILN_CHECK(fs::exists(entry, ec), "KILN_PLUGIN_PATH names ", entry,
                 ", which does not exist; it lists op package files or folders, separated by ':'");
      names.push_back(load_op_library(entry).name);
    }
  }
  return names;
}

}  // namespace kiln

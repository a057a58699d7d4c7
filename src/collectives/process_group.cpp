// What every process-group backend shares: Work handles, the synchronous
// forms of the collectives, handles that stand for groups in op attributes,
// and the registry init picks a backend from.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "kiln/dist.h"
#include "kiln/error.h"

namespace kiln::dist {

void Work::wait() const {
  if (on_device_) return on_device_->wait();
  if (!done_.valid()) return;
  if (waited_ns_ && !completed()) {
    const auto start = std::chrono::steady_clock::now();
    done_.wait();
    *waited_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
  done_.get();
}

bool Work::completed() const {
  if (on_device_) return on_device_->done();
  return !done_.valid() || done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

// Marks the collective a synchronous form submits as waited for at once.
struct WaitedAtOnce {
  explicit WaitedAtOnce(ProcessGroup& g) : g(g) { g.waited_at_once_ = true; }
  ~WaitedAtOnce() { g.waited_at_once_ = false; }
  ProcessGroup& g;
};

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  const WaitedAtOnce here(*this);
  all_reduce_async(t, op).wait();
}

void ProcessGroup::broadcast(Tensor& t, int root) {
  const WaitedAtOnce here(*this);
  broadcast_async(t, root).wait();
}

void ProcessGroup::barrier() {
  const WaitedAtOnce here(*this);
  barrier_async().wait();
}

Tensor ProcessGroup::all_gather(const Tensor& t) {
  Shape shape = t.shape();
  shape.insert(shape.begin(), size());
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  const WaitedAtOnce here(*this);
  all_gather_async(out, t).wait();
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& t, ReduceOp op) {
  KILN_CHECK(t.dim() >= 1, "dist: reduce_scatter takes a tensor with at least one axis, got ", t.meta_str());
  Shape shape = t.shape();
  shape[0] /= size();
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  const WaitedAtOnce here(*this);
  reduce_scatter_async(out, t, op).wait();
  return out;
}

void ProcessGroup::check_gather(const Tensor& out, const Tensor& in) const {
  Shape want = in.shape();
  want.insert(want.begin(), size());
  KILN_CHECK(out.shape() == want && out.dtype() == in.dtype(), "dist: all_gather into ", out.meta_str(), " from ",
             in.meta_str(), "; the output must be ", dtype_name(in.dtype()), shape_str(want),
             " (the group's size first)");
}

void ProcessGroup::check_scatter(const Tensor& out, const Tensor& in) const {
  const int64_t n = size();
  KILN_CHECK(in.dim() >= 1 && in.size(0) % n == 0, "dist: reduce_scatter splits the first axis in ", n,
             " equal parts, but the input is ", in.meta_str(), "; pad it to a multiple of ", n);
  Shape want = in.shape();
  want[0] /= n;
  KILN_CHECK(out.shape() == want && out.dtype() == in.dtype(), "dist: reduce_scatter into ", out.meta_str(),
             "; the output must be ", dtype_name(in.dtype()), shape_str(want));
}

namespace {
std::mutex handles_mutex;
std::vector<std::weak_ptr<ProcessGroup>> handles;

std::mutex backends_mutex;
std::map<std::string, BackendFactory>& backends() {
  static std::map<std::string, BackendFactory> table;
  return table;
}

// The library that brings a backend libkiln does not link: NCCL's, beside
// libkiln (or in KILN_BACKEND_PATH, like the device backends). Loading it
// registers the backend; "" when there is none, else why it did not load.
std::string load_backend_library(const std::string& name) {
  if (name != "nccl") return "";
  std::filesystem::path dir;
  Dl_info info{};
  if (const char* env = std::getenv("KILN_BACKEND_PATH"))
    dir = env;
  else if (dladdr(reinterpret_cast<void*>(&init), &info) != 0 && info.dli_fname != nullptr)
    dir = std::filesystem::path(info.dli_fname).parent_path();
  const std::filesystem::path file = dir / ("libkiln_" + name + ".so");
  std::error_code ec;
  if (dir.empty() || !std::filesystem::exists(file, ec)) return "";
  if (dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return "";
  const char* why = dlerror();
  return file.string() + " is there but did not load: " + (why ? why : "no reason given");
}

// A backend this process lacks: what would provide it.
[[noreturn]] void refuse_backend(const std::string& name, const std::string& why_not_loaded) {
  KILN_CHECK(why_not_loaded.empty(), "dist::init: backend '", name, "': ", why_not_loaded);
  KILN_CHECK(name != "gloo", "dist::init: backend 'gloo' is not in this process: it lives in libkiln_distributed, which ",
             "this Kiln was built without (configure with -DKILN_BUILD_DIST=ON) or which the program does not link ",
             "(link Kiln::distributed)");
  KILN_CHECK(name != "nccl", "dist::init: backend 'nccl' needs libkiln_nccl, which this build of Kiln does not have ",
             "(it comes with the CUDA backend where NCCL is found: -DKILN_CUDA=on, NCCL's nccl.h and libnccl); 'gloo' ",
             "runs the collectives on CPU tensors (TCP between hosts, shared memory within one)");
  KILN_CHECK(name != "mpi", "dist::init: backend 'mpi' is not in this build (Debian's Gloo is built without MPI); ",
             "use 'gloo' and start the ranks with kiln launch, torchrun or srun");
  KILN_FAIL("dist::init: unknown backend '", name, "'; Kiln's backends are 'gloo' (libkiln_distributed), 'nccl' (with ",
            "the CUDA backend) and 'mpi'");
}
}  // namespace

int64_t handle_of(const std::shared_ptr<ProcessGroup>& group) {
  KILN_CHECK(group != nullptr, "dist: no process group (this rank is not a member of it)");
  std::lock_guard<std::mutex> lock(handles_mutex);
  for (size_t i = 0; i < handles.size(); ++i)
    if (handles[i].lock() == group) return static_cast<int64_t>(i);
  handles.push_back(group);
  return static_cast<int64_t>(handles.size()) - 1;
}

std::shared_ptr<ProcessGroup> group_of_handle(int64_t handle) {
  std::lock_guard<std::mutex> lock(handles_mutex);
  std::shared_ptr<ProcessGroup> group;
  if (handle >= 0 && static_cast<size_t>(handle) < handles.size()) group = handles[static_cast<size_t>(handle)].lock();
  KILN_CHECK(group != nullptr, "dist: process group ", handle, " no longer exists; keep the group alive as long as "
             "what uses it (a DataParallel, a compiled training step)");
  return group;
}

void register_backend(const std::string& name, BackendFactory make) {
  std::lock_guard<std::mutex> lock(backends_mutex);
  backends()[name] = std::move(make);
}

std::vector<std::string> registered_backends() {
  std::lock_guard<std::mutex> lock(backends_mutex);
  std::vector<std::string> names;
  for (const auto& [name, make] : backends()) names.push_back(name);
  return names;
}

std::shared_ptr<ProcessGroup> init(const InitOptions& options) {
  // Before anything is opened: a backend this process lacks fails every
  // rank alike, at once, rather than at the rendezvous.
  auto find = [&] {
    std::lock_guard<std::mutex> lock(backends_mutex);
    auto it = backends().find(options.backend);
    return it != backends().end() ? it->second : BackendFactory();
  };
  BackendFactory make = find();
  if (!make) {
    const std::string why = load_backend_library(options.backend);
    make = find();
    if (!make) refuse_backend(options.backend, why);
  }
  return make(place_from_environment(options.place), options);
}

}  // namespace kiln::dist

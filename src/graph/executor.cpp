#include "graph/executor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/device_memory.h"
#include "core/read_observer.h"
#include "graph/placement.h"
#include "kiln/backend.h"
#include "kiln/generator.h"
#include "kiln/parallel.h"
#include "kiln/profiler.h"
#include "ops/dispatch_internal.h"

namespace kiln::graph {
namespace {

Tensor slot(const Storage& arena, int64_t byte_offset, const TensorMeta& m) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = arena;
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->offset = byte_offset / static_cast<int64_t>(dtype_size(m.dtype));
  impl->dtype = m.dtype;
  return Tensor(impl);
}

}  // namespace

KernelFn Executable::kernel_of(const Node& n, const std::vector<Tensor>& in, bool* fallback, Widening* widened) {
  const Tensor& d = in[n.op->dispatch_input];
  const DType dtype = d.dtype();
  std::vector<std::optional<DType>> dtypes;
  for (const Tensor& t : in) dtypes.push_back(t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt);
  *fallback = false;
  // A node placed on the CPU (place_nodes) runs the CPU's kernel on its CPU values.
  if (device_.type != DeviceType::CPU && !n.op->has_tag(kTagTransfer) && !n.outputs.empty() &&
      graph_.values[n.outputs[0]].meta.device.type == DeviceType::CPU) {
    *fallback = !n.op->has_tag(kTagView);
    return n.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(dtype)];
  }
  std::string why;
  KernelFn k = device_kernel(*n.op, device_, dtypes, dtype, n.attrs, &why);
  if (k == nullptr && widened != nullptr) k = widening_kernel(*n.op, device_, dtypes, dtype, n.attrs, widened);
  if (k == nullptr && device_.type != DeviceType::CPU) {
    k = n.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(dtype)];
    // On a device in host memory the CPU's kernel runs on the tensors where
    // they are; on any other it runs on copies (run_slots). A view needs
    // nothing more: it only makes sizes and strides over the same storage.
    if (k != nullptr && !n.op->has_tag(kTagView)) {
      allow_fallback(*n.op, device_, dtype, why);
      *fallback = true;
      if (why.empty()) why = std::string("no ") + device_type_name(device_.type) + " kernel for " + dtype_name(dtype);
      const bool in_place = backend(device_.type).host_memory();
      on_cpu_.push_back(n.name() + " (" + why + (in_place ? ", in place on the device's memory)" : ", on copies)"));
    }
  }
  KILN_CHECK(k != nullptr, "compiled graph: no ", device_type_name(device_.type), " kernel for '", n.op->name,
             "' with dtype ", dtype_name(dtype));
  return k;
}

Executable::Executable(Graph g, Device device, std::shared_ptr<SharedArena> shared)
    : graph_(std::move(g)), device_(device), shared_(std::move(shared)) {
  graph_.splice();
  // Where the host cannot read the device's memory, what the device lacks
  // moves to the CPU with its data; elsewhere the CPU's kernels run in place.
  if (!backend(device_.type).host_memory()) on_cpu_ = place_nodes(graph_, device_);
  plan_ = plan_memory(graph_, device_);
  const auto arena_bytes = static_cast<size_t>(std::max<int64_t>(plan_.arena_bytes, 64));
  if (shared_ && !(shared_->device_ == device_)) shared_.reset();
  if (shared_) {
    if (shared_->bytes() < arena_bytes) {
      // The graphs on it move to a larger one, a quarter larger at least:
      // shapes that grow a little at a time (a decoder's cache, one token a
      // run) move them now and then, not at every new size. Each binds to
      // it when next called; the old one goes now.
      const size_t grown = std::max(arena_bytes, shared_->bytes() + shared_->bytes() / 4);
      for (Executable* user : shared_->users_) user->release_arena();
      shared_->storage_ = std::make_shared<StorageImpl>(grown, device_);
    }
    shared_->users_.push_back(this);
    arena_ = shared_->storage_;
  } else {
    arena_ = std::make_shared<StorageImpl>(arena_bytes, device_);
  }
  MemoryPlan cpu_plan;
  if (!on_cpu_.empty()) {
    cpu_plan = plan_memory(graph_, cpu_device());
    cpu_arena_ = std::make_shared<StorageImpl>(static_cast<size_t>(std::max<int64_t>(cpu_plan.arena_bytes, 64)), cpu_device());
  }
  tensors_.resize(graph_.values.size());
  for (size_t id = 0; id < graph_.values.size(); ++id) {
    const Value& v = graph_.values[id];
    if (v.kind == ValueKind::Param || v.kind == ValueKind::Constant) tensors_[id] = v.tensor;
    else if (plan_.offset[id] >= 0) tensors_[id] = slot(arena_, plan_.offset[id], v.meta);
    else if (cpu_arena_ && cpu_plan.offset[id] >= 0) tensors_[id] = slot(cpu_arena_, cpu_plan.offset[id], v.meta);
  }
  for (int id : graph_.inputs) {
    if (!tensors_[id].defined())
      tensors_[id] = Tensor::empty(graph_.values[id].meta.shape, graph_.values[id].meta.dtype, device_);
    input_slots_.push_back(tensors_[id]);  // an input no node reads still takes what the caller writes
  }
  for (const Node& n : graph_.nodes) {
    Step s;
    s.node = &n;
    for (int id : n.inputs) s.in.push_back(id >= 0 ? tensors_[id] : Tensor());
    s.out.resize(n.outputs.size());
    if (n.is_view()) {
      // A view's geometry depends only on its input's, which is fixed: compute it once.
      bool fallback = false;
      kernel_of(n, s.in, &fallback)(s.in, s.out, n.attrs);
      for (size_t i = 0; i < n.outputs.size(); ++i) tensors_[n.outputs[i]] = s.out[i];
      continue;
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) s.out[i] = tensors_[n.outputs[i]];
    if (n.op) s.kernel = kernel_of(n, s.in, &s.fallback, &s.widened);
    s.on_cpu = s.fallback && !n.outputs.empty() && device_.type != DeviceType::CPU &&
               graph_.values[n.outputs[0]].meta.device.type == DeviceType::CPU;
    steps_.push_back(std::move(s));
  }
  for (int id : graph_.outputs) outputs_.push_back(tensors_[id]);
  blocker_ = recording_blocker();
  if (!blocker_.empty() && device_.type != DeviceType::CPU) recording_status_ = "runs unrecorded: " + blocker_;
}

Executable::~Executable() {
  if (shared_) std::erase(shared_->users_, this);
}

void Executable::release_arena() {
  recording_.reset();  // it replays the old arena's addresses
  plain_runs_ = 0;
  for (size_t id = 0; id < graph_.values.size(); ++id)
    if (graph_.values[id].kind != ValueKind::Param && graph_.values[id].kind != ValueKind::Constant &&
        (!tensors_[id].defined() || tensors_[id].impl().storage == arena_))
      tensors_[id] = Tensor();
  for (Step& s : steps_) {
    s.in.clear();
    for (Tensor& t : s.out) t = Tensor();
  }
  input_slots_.clear();
  outputs_.clear();
  arena_.reset();
  stale_ = true;
}

void Executable::bind(const Storage& arena) {
  recording_.reset();  // it replays the old arena's addresses
  plain_runs_ = 0;
  stale_ = false;
  arena_ = arena;
  for (size_t id = 0; id < graph_.values.size(); ++id) {
    const Value& v = graph_.values[id];
    if (v.kind != ValueKind::Param && v.kind != ValueKind::Constant && plan_.offset[id] >= 0)
      tensors_[id] = slot(arena_, plan_.offset[id], v.meta);
  }
  input_slots_.clear();
  for (int id : graph_.inputs) input_slots_.push_back(tensors_[id]);
  size_t step = 0;
  for (const Node& n : graph_.nodes) {
    std::vector<Tensor> in;
    for (int id : n.inputs) in.push_back(id >= 0 ? tensors_[id] : Tensor());
    if (n.is_view()) {  // the same geometry over the new storage
      std::vector<Tensor> out(n.outputs.size());
      bool fallback = false;
      kernel_of(n, in, &fallback)(in, out, n.attrs);
      for (size_t i = 0; i < n.outputs.size(); ++i) tensors_[n.outputs[i]] = out[i];
      continue;
    }
    Step& s = steps_[step++];
    s.in = std::move(in);
    for (size_t i = 0; i < n.outputs.size(); ++i) s.out[i] = tensors_[n.outputs[i]];
  }
  outputs_.clear();
  for (int id : graph_.outputs) outputs_.push_back(tensors_[id]);
}

const std::vector<Tensor>& Executable::run(const std::vector<Tensor>& inputs) {
  follow_arena();
  apply_num_threads_to_this_thread();
  KILN_CHECK(inputs.size() == graph_.inputs.size(), "compiled graph takes ", graph_.inputs.size(), " inputs, got ",
             inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor& dst = tensors_[graph_.inputs[i]];
    const Tensor& src = inputs[i];
    KILN_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(), "compiled graph: input ", i, " is ",
               src.meta_str(), " but the graph was built for ", dst.meta_str());
    if (src.is_contiguous())  // a memcpy between two tensors in host memory
      copy_between(dst.device(), detail::device_address(dst), src.device(), detail::device_address(src),
                   static_cast<size_t>(src.numel()) * src.element_size());
    else
      dst.copy_(src.to(dst.device()));
  }
  return run_slots();
}

namespace {

// Points this thread's random kernels at recorded draws while it lives.
class DrawsInstalled {
 public:
  explicit DrawsInstalled(detail::RecordedDraws* draws) : before_(detail::set_recorded_draws(draws)) {}
  ~DrawsInstalled() { detail::set_recorded_draws(before_); }
  DrawsInstalled(const DrawsInstalled&) = delete;
  DrawsInstalled& operator=(const DrawsInstalled&) = delete;

 private:
  detail::RecordedDraws* before_;
};

}  // namespace

std::string Executable::recording_blocker() const {
  if (device_.type == DeviceType::CPU) return "the CPU runs work as it is issued";
  if (const char* env = std::getenv("KILN_CUDA_GRAPHS"); env && std::string(env) == "0") return "KILN_CUDA_GRAPHS=0";
  // (A node on the CPU first: the copies around it follow from it.)
  for (const Step& s : steps_)
    if (s.kernel && (s.fallback || s.on_cpu)) return "node '" + s.node->name() + "' runs on the CPU";
  for (const Step& s : steps_) {
    const std::string node = "node '" + s.node->name() + "' ";
    if (!s.kernel) return node + "runs host code";
    if (s.node->op->has_tag(kTagCollective)) return node + "is a collective, run by the process group's host code";
    if (s.node->op->has_tag(kTagTransfer)) return node + "copies between devices";
    for (const Tensor& t : s.in)
      if (t.defined() && !(t.device() == device_))
        return node + "reads a tensor on " + t.device().str() + " at each run";
  }
  return "";
}

std::vector<const void*> Executable::operand_addresses() const {
  std::vector<const void*> at;
  for (const Step& s : steps_)
    for (const auto* list : {&s.in, &s.out})
      for (const Tensor& t : *list) at.push_back(t.defined() ? t.device_data() : nullptr);
  return at;
}

// Plain runs first (a kernel's first call may compile code or choose an
// algorithm, and caches fill), then one recorded, then replays while every
// operand keeps its address (new parameter storage records again). A run
// under the profiler runs plainly, step by step.
const std::vector<Tensor>& Executable::run_slots() {
  follow_arena();
  apply_num_threads_to_this_thread();
  const bool profiling = profiler::detail::active();
  Backend& b = backend(device_.type);
  if (recording_ && !profiling && operand_addresses() != recorded_addresses_) recording_.reset(), plain_runs_ = 0;
  if (recording_ && !profiling) {
    // (A backend that replays by running the steps' host code again, as the
    // reference backend does, finds the draws as the recording did.)
    detail::RecordedDraws draws{draw_state_.defined() ? draw_state_.device_data() : nullptr, 0};
    if (draws.state) write_draw_state(default_generator().take_counters(recorded_counters_));
    {
      const DrawsInstalled installed(draws.state ? &draws : nullptr);
      recording_->replay();
    }
    for (const Step& s : steps_)
      if (s.kernel) bump_written_versions(*s.node->op, s.in, s.node->attrs);
  } else if (blocker_.empty() && !profiling && ++plain_runs_ > 2) {
    std::string why;
    // Random steps draw through the device's copy of the generator's
    // counters, written before each run; this run's base is where the
    // generator is now, and what they take is taken once they are recorded.
    detail::RecordedDraws draws;
    if (std::any_of(steps_.begin(), steps_.end(), [](const Step& s) { return s.node->op->has_tag(kTagRandom); })) {
      if (!draw_state_.defined()) draw_state_ = Tensor::empty({2}, DType::Int64, device_);
      write_draw_state(default_generator().offset());
      draws.state = draw_state_.device_data();
    }
    {
      const DrawsInstalled installed(draws.state ? &draws : nullptr);
      recording_ = b.record_steps(
          device_.index, steps_.size(), [this](size_t i) { run_step(i, false, false); }, &why);
    }
    if (recording_) {
      recorded_counters_ = draws.taken;
      default_generator().take_counters(draws.taken);
      recorded_addresses_ = operand_addresses();
      ++recordings_;
      recording_status_ =
          "replays one recorded graph of its " + std::to_string(steps_.size()) + " steps per run (" +
          (recordings_ == 1 ? std::string("recorded once") : "recorded " + std::to_string(recordings_) + " times");
      if (recording_->kept_bytes() > 0) {
        char kept[64];
        std::snprintf(kept, sizeof kept, "; %.1f MB of the device's memory kept for recordings",
                      static_cast<double>(recording_->kept_bytes()) / 1e6);
        recording_status_ += kept;
      }
      recording_status_ += ")";
    } else {
      blocker_ = why;
      recording_status_ = "runs unrecorded: " + blocker_;
      run_steps_plainly(b, profiling);
    }
  } else {
    run_steps_plainly(b, profiling);
  }
  b.synchronize(device_.index);
  return outputs_;
}

void Executable::write_draw_state(uint64_t base) {
  const Generator& g = default_generator();
  const uint64_t state[2] = {g.initial_seed(), base};
  copy_between(device_, detail::device_address(draw_state_), cpu_device(), state, sizeof state);
}

void Executable::run_steps_plainly(Backend& b, bool profiling) {
  const bool host_memory = b.host_memory();
  b.run_steps(device_.index, steps_.size(),
              [this, profiling, host_memory](size_t i) { run_step(i, profiling, host_memory); });
}

void Executable::run_step(size_t i, bool profiling, bool host_memory) {
  Step& s = steps_[i];
  const int64_t start = profiling ? profiler::detail::now_ns() : 0;
  const DeviceTimer timer(device_, profiling && !s.fallback && !s.on_cpu);
  try {
    const detail::KernelScope in_kernel(s.fallback ? cpu_device() : device_, profiling);
    if (s.kernel) {
      if (s.on_cpu)
        count_fallback(), s.kernel(s.in, s.out, s.node->attrs);
      else if (s.fallback && !host_memory)
        run_on_cpu(*s.node->op, s.kernel, s.in, s.out, s.node->attrs, device_);
      else if (s.fallback)
        count_fallback(), s.kernel(s.in, s.out, s.node->attrs);
      else if (s.widened != Widening::None)
        run_widened(*s.node->op, s.kernel, s.widened, s.in, s.out, s.node->attrs);
      else
        s.kernel(s.in, s.out, s.node->attrs);
      bump_written_versions(*s.node->op, s.in, s.node->attrs);
    } else
      s.node->custom(s.in, s.out);
  } catch (const std::exception& e) {
    KILN_FAIL("in the compiled graph, node '", s.node->name(), "': ", e.what());
  }
  if (profiling) record_profile(s.node->op, s.node->name(), device_, s.in, s.out, start, s.fallback, timer.stop());
}

}  // namespace kiln::graph

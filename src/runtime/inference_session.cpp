// InferenceSession: a Program (ONNX or MindIR) traced and compiled per input signature,
// with one compiled function per concurrent caller.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/backend.h"
#include "kiln/caller_language.h"
#include "kiln/functional.h"
#include "kiln/grad_mode.h"
#include "kiln/jit.h"
#include "kiln/parallel.h"
#include "kiln/runtime.h"
#include "kiln/thread_governor.h"
#include "runtime/onnx_graph.h"
#include "runtime/program.h"

namespace kiln {

std::string TensorInfo::str() const {
  std::string s = name + ": " + dtype_name(dtype) + " ";
  if (!shape_known) return s + "(any shape)";
  s += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += shape[i] >= 0 ? std::to_string(shape[i]) : dim_names[i];
  }
  return s + "]";
}

bool TensorInfo::accepts(const Tensor& t) const {
  if (t.dtype() != dtype) return false;
  if (!shape_known) return true;
  if (t.dim() != static_cast<int64_t>(shape.size())) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] >= 0 && shape[d] != t.shape()[d]) return false;
  return true;
}

struct InferenceSession::Impl {
  std::shared_ptr<const runtime::Program> program;
  SessionOptions options;
  Device device = cpu_device();
  // Compiled functions not in use, per the values of the inputs bound by
  // value (none for most models: then one key, "").
  std::mutex mutex;
  std::map<std::string, std::vector<std::unique_ptr<jit::CompiledFunction>>> idle;
  // Set when the model's control flow turned out to depend on its inputs'
  // values (an If on a computed condition): no graph is compiled any more.
  std::atomic<bool> node_by_node{false};

  void run_node_by_node_from_now(const runtime::DataDependentControlFlow& why) {
    if (!node_by_node.exchange(true)) std::fprintf(stderr, "kiln: %s\n", why.what());
  }
  static constexpr size_t kMaxBoundKeys = 16;

  // SessionOptions::buckets as the compiled functions' dynamic axes (their
  // inputs are the model's, less those bound by value).
  std::vector<jit::DynamicAxis> dynamic;
  void set_buckets() {
    const auto& infos = program->inputs();
    const auto& by_value = program->bound_by_value();
    for (const SessionOptions::Bucket& b : options.buckets) {
      int free = 0;
      size_t i = 0;
      for (; i < infos.size() && infos[i].name != b.input; ++i) free += by_value[i] ? 0 : 1;
      std::string names;
      for (const auto& info : infos) names += (names.empty() ? "" : ", ") + info.name;
      KILN_CHECK(i < infos.size(), "InferenceSession: buckets name input '", b.input, "', which the model lacks; its inputs are ",
                 names);
      KILN_CHECK(!by_value[i], "InferenceSession: input '", b.input,
                 "' decides the model's shapes by its values (a shape or size input), so it cannot be padded to buckets");
      KILN_CHECK(!b.sizes.empty(), "InferenceSession: the buckets of input '", b.input, "' give no sizes");
      dynamic.push_back({free, b.axis, b.sizes, b.pad_value, {}});
    }
  }

  // The axes the model leaves free (dim_param or no size), of the inputs
  // not bound by value: dynamic axes, over which a compile may generalize.
  std::vector<jit::DynamicAxis> free_axes() const {
    std::vector<jit::DynamicAxis> axes;
    const auto& infos = program->inputs();
    const auto& by_value = program->bound_by_value();
    int free = 0;
    for (size_t i = 0; i < infos.size(); ++i) {
      if (by_value[i]) continue;
      if (infos[i].shape_known)
        for (size_t d = 0; d < infos[i].shape.size(); ++d)
          if (infos[i].shape[d] < 0) axes.push_back({free, static_cast<int>(d)});
      ++free;
    }
    return axes;
  }

  std::string key_of(const std::vector<Tensor>& inputs) const {
    std::string key;
    const auto& bound = program->bound_by_value();
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!bound[i]) continue;
      Tensor c = inputs[i].contiguous();
      key += c.meta_str();
      key.append(static_cast<const char*>(c.raw_data()), c.numel() * c.element_size());
    }
    return key;
  }

  std::unique_ptr<jit::CompiledFunction> take(const std::string& key, const std::vector<Tensor>& inputs) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = idle.find(key);
      if (it != idle.end() && !it->second.empty()) {
        auto f = std::move(it->second.back());
        it->second.pop_back();
        return f;
      }
    }
    jit::CompileOptions o;
    o.recompile = jit::RecompilePolicy::Silent;  // a new batch size is expected, not a mistake
    o.inference = true;
    o.optimize = options.optimization_level >= 2;
    o.name = "onnx";
    o.max_cached_graphs = 64;  // one per input shape in use (batch sizes, lengths), on one arena
    o.dynamic = dynamic.empty() ? free_axes() : dynamic;
    if (!(device == cpu_device())) o.device = device;
    // Inputs bound by value are constants of this graph; the others are its inputs.
    std::vector<Tensor> bound;
    const auto& by_value = program->bound_by_value();
    for (size_t i = 0; i < inputs.size(); ++i) bound.push_back(by_value[i] ? inputs[i].clone() : Tensor());
    auto prog = program;
    auto fn = [prog, bound](const std::vector<Tensor>& free) {
      std::vector<Tensor> all = bound;
      size_t next = 0;
      for (auto& t : all)
        if (!t.defined()) t = free.at(next++);
      return prog->run(all);
    };
    return std::make_unique<jit::CompiledFunction>(jit::compile(fn, {}, o));
  }

  void give_back(const std::string& key, std::unique_ptr<jit::CompiledFunction> f) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!idle.count(key) && idle.size() >= kMaxBoundKeys) idle.clear();  // many distinct bound values: start over
    idle[key].push_back(std::move(f));
  }

  // One governor per input signature (batch sizes differ in what threads buy);
  // shared, since a run holds its own while another caller may start over.
  std::map<std::string, std::shared_ptr<ThreadGovernor>> governors;
  static constexpr size_t kMaxGovernors = 64;

  std::shared_ptr<ThreadGovernor> governor(const std::string& signature) {
    if (!options.adapt_threads || !(device == cpu_device()) || get_num_threads() == 1) return nullptr;
    std::lock_guard<std::mutex> lock(mutex);
    auto it = governors.find(signature);
    if (it != governors.end()) return it->second;
    if (governors.size() >= kMaxGovernors) governors.clear();  // many signatures: start over
    return governors.emplace(signature, std::make_shared<ThreadGovernor>()).first->second;
  }

  std::vector<Tensor> free_inputs(const std::vector<Tensor>& inputs) const {
    std::vector<Tensor> free;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!program->bound_by_value()[i]) free.push_back(inputs[i]);
    return free;
  }
};

namespace {
// A thread governor's key: each size by its class (1, 2-3, 4-7, ...), so
// that a model called with many lengths or batch sizes has a governor per
// class, which sees enough runs to settle (one per exact shape kept
// exploring: 40 lengths taken in turn ran a tenth slower than each alone).
// Its runs' times are compared per input element (work_of).
std::string size_class_signature(const std::vector<Shape>& shapes) {
  std::string s;
  for (const auto& shape : shapes) {
    for (int64_t d : shape) s += std::to_string(std::bit_width(static_cast<uint64_t>(d))) + ",";
    s += ";";
  }
  return s;
}

double work_of(const std::vector<Shape>& shapes) {
  double elements = 0;
  for (const auto& shape : shapes) elements += static_cast<double>(numel_of(shape));
  return elements;
}

// inf and NaN run node by node: the compiled graph's kernels are chosen for
// speed per batch size, and some (Winograd convolution, which spreads one inf
// over its whole tile as NaN) give other non-finite answers than the plain
// sum of products. Node by node, every run and batch size gives the same one.
bool any_non_finite(const std::vector<Tensor>& inputs) {
  for (const auto& t : inputs)
    if (t.defined() && first_non_finite(t) >= 0) return true;
  return false;
}
}  // namespace

InferenceSession::InferenceSession(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;
InferenceSession::InferenceSession(InferenceSession&&) noexcept = default;
InferenceSession& InferenceSession::operator=(InferenceSession&&) noexcept = default;

// SessionOptions::precision: none for float32, else the half-precision dtype.
static std::optional<DType> half_precision(const std::string& precision) {
  std::optional<DType> dtype;
  KILN_CHECK(parse_precision(precision, dtype),
             in_caller_language("SessionOptions::precision", "InferenceSession(precision=...)"), " is '", precision,
             "', not a precision Kiln infers in: give float32 (fp32), bfloat16 (bf16) or float16 (fp16)");
  return dtype;
}

InferenceSession InferenceSession::from_bytes(const std::string& bytes, SessionOptions options, const std::string& name) {
  const Device device = parse_device(options.device);
  KILN_CHECK(find_backend(device.type) != nullptr, "InferenceSession: device '", options.device,
             "': ", detail::no_backend_message(device.type));
  KILN_CHECK(options.optimization_level >= 0 && options.optimization_level <= 2,
             "InferenceSession: optimization_level must be 0, 1 or 2, got ", options.optimization_level);
  KILN_CHECK(device == cpu_device() || options.optimization_level > 0, "InferenceSession: optimization_level 0 runs the "
             "model node by node on the CPU; give 1 or 2 to run it compiled on ", device.str());
  KILN_CHECK(options.threads >= 0, "InferenceSession: threads must be >= 0, got ", options.threads);
  if (options.threads > 0) set_num_threads(options.threads);
  auto impl = std::make_shared<Impl>();
  std::unique_ptr<runtime::Program> program = runtime::load_program(bytes, name);
  if (const std::optional<DType> half = half_precision(options.precision))
    program = runtime::autocast_program(std::move(program), *half);
  impl->program = std::move(program);
  impl->options = options;
  impl->device = device;
  impl->set_buckets();
  return InferenceSession(impl);
}

InferenceSession::InferenceSession(const std::string& path, SessionOptions options) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open ONNX model '", path, "'");
  std::stringstream buffer;
  buffer << f.rdbuf();
  impl_ = from_bytes(buffer.str(), options, "'" + path + "'").impl_;
}

int InferenceSession::compiles() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  int n = 0;
  for (const auto& [key, functions] : impl_->idle)
    for (const auto& f : functions) n += f->compiles();
  return n;
}

std::vector<Tensor> InferenceSession::run(const std::vector<Tensor>& inputs) {
  NoGradGuard no_grad;
  impl_->program->check_inputs(inputs);  // before tracing, so the message is about the caller's tensors
  const bool on_cpu = impl_->device == cpu_device();
  if (impl_->options.optimization_level == 0 || impl_->node_by_node || (on_cpu && any_non_finite(inputs)))
    return impl_->program->run(inputs);
  std::string key = impl_->key_of(inputs);
  std::vector<Shape> shapes;
  for (const auto& t : inputs) shapes.push_back(t.shape());
  GovernedRun governed(impl_->governor(key + size_class_signature(shapes)), true, work_of(shapes));
  auto fn = impl_->take(key, inputs);
  std::vector<Tensor> out;
  try {
    out = (*fn)(impl_->free_inputs(inputs));
  } catch (const runtime::DataDependentControlFlow& e) {
    impl_->run_node_by_node_from_now(e);
    return impl_->program->run(inputs);
  } catch (...) {
    impl_->give_back(key, std::move(fn));
    throw;
  }
  impl_->give_back(key, std::move(fn));
  governed.finished();
  return out;
}

void InferenceSession::run_in_place(const std::vector<Shape>& shapes, const FillInput& fill, const ReadOutputs& read) {
  NoGradGuard no_grad;
  const auto& infos = inputs();
  KILN_CHECK(shapes.size() == infos.size(), "the model takes ", infos.size(), " inputs, got ", shapes.size(), " shapes");
  std::vector<DType> dtypes;
  std::vector<Tensor> shaped;  // checked against the model before anything is compiled (no memory behind them)
  for (size_t i = 0; i < shapes.size(); ++i) {
    dtypes.push_back(infos[i].dtype);
    shaped.push_back(Tensor::empty({}, infos[i].dtype).expand(shapes[i]));
  }
  impl_->program->check_inputs(shaped);
  const auto& by_value = impl_->program->bound_by_value();
  const bool compiled = impl_->options.optimization_level > 0 && !impl_->node_by_node &&
                        std::none_of(by_value.begin(), by_value.end(), [](bool b) { return b; });
  auto node_by_node = [&] {
    std::vector<Tensor> buffers;
    for (size_t i = 0; i < shapes.size(); ++i) {
      buffers.push_back(Tensor::empty(shapes[i], dtypes[i]));
      fill(i, buffers[i]);
    }
    read(run(buffers));
  };
  if (!compiled) {
    node_by_node();
    return;
  }
  GovernedRun governed(impl_->governor(size_class_signature(shapes)), true, work_of(shapes));
  auto fn = impl_->take("", std::vector<Tensor>(shapes.size()));
  std::vector<Tensor> slots;
  try {
    slots = fn->input_slots(shapes, dtypes);
  } catch (const runtime::DataDependentControlFlow& e) {
    impl_->run_node_by_node_from_now(e);
    node_by_node();
    return;
  } catch (...) {
    impl_->give_back("", std::move(fn));
    throw;
  }
  try {
    for (size_t i = 0; i < slots.size(); ++i) fill(i, slots[i]);
    if (impl_->device == cpu_device() && any_non_finite(slots)) read(impl_->program->run(slots));
    else read(fn->run_slots());
  } catch (...) {
    impl_->give_back("", std::move(fn));
    throw;
  }
  impl_->give_back("", std::move(fn));
  governed.finished();
}

std::map<std::string, Tensor> InferenceSession::run(const std::map<std::string, Tensor>& named_inputs) {
  std::vector<Tensor> ordered;
  for (const auto& info : inputs()) {
    auto it = named_inputs.find(info.name);
    KILN_CHECK(it != named_inputs.end(), "input '", info.name, "' is missing; expected ", info.str());
    ordered.push_back(it->second);
  }
  for (const auto& [name, t] : named_inputs) {
    bool known = false;
    for (const auto& info : inputs()) known = known || info.name == name;
    KILN_CHECK(known, "the model has no input named '", name, "'");
  }
  auto out = run(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < out.size(); ++i) named[outputs()[i].name] = out[i];
  return named;
}

const std::vector<TensorInfo>& InferenceSession::inputs() const { return impl_->program->inputs(); }
const std::vector<TensorInfo>& InferenceSession::outputs() const { return impl_->program->outputs(); }
const std::map<std::string, std::string>& InferenceSession::metadata() const { return impl_->program->metadata(); }
int InferenceSession::opset() const { return impl_->program->opset(); }
const std::string& InferenceSession::producer() const { return impl_->program->producer(); }
const std::string& InferenceSession::rewrites() const { return impl_->program->rewrites(); }

std::vector<std::string> supported_onnx_ops() {
  std::vector<std::string> ops;
  for (const auto& [name, fn] : runtime::converters()) ops.push_back(name);
  for (const auto& [name, fn] : runtime::control_flow_ops()) ops.push_back(name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace kiln

// jit::compile: the cache of graphs per input signature, tracing, the pass
// pipeline, dumps and the compile report.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "graph/compiled.h"
#include "graph/dynamic_axes.h"
#include "graph/passes.h"
#include "graph/tracer.h"
#include "kiln/allocator.h"
#include "kiln/autograd.h"
#include "kiln/backend.h"
#include "kiln/caller_language.h"
#include "kiln/profiler.h"
#include "ops/dispatch_hooks.h"

namespace kiln {
namespace {
// Set from any thread, read by every Model call: the mode is an atomic, and
// each reader gets its own copy of the Context.
std::atomic<Mode> g_mode{Mode::Eager};

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  KILN_CHECK(f.good(), "KILN_DUMP_GRAPH: cannot write ", path, "; check that the folder exists and is writable");
  f << text;
}
}  // namespace

void set_context(const Context& c) { g_mode.store(c.mode); }
const Context& context() {
  thread_local Context current;
  current.mode = g_mode.load();
  return current;
}

namespace jit {

std::string CompileReport::str() const {
  char line[256];
  std::string s = std::string(instantiated ? "instantiated" : "compiled") + " for " + signature + " (compile " +
                  std::to_string(compile) + (cause.empty() ? "" : ": " + cause) + ")\n";
  if (!symbolic.empty()) s += "  " + symbolic + "\n";
  std::snprintf(line, sizeof line, "  trace %.1f ms, passes %.1f ms, prepare %.1f ms, total %.1f ms\n", trace_ms,
                passes_ms, prepare_ms, total_ms);
  s += line;
  std::snprintf(line, sizeof line, "  %zu traced ops -> %zu nodes, %zu kernels; arena %.2f MB (%.2f MB without reuse)\n",
                traced_nodes, final_nodes, kernels, arena_bytes / 1e6, unshared_bytes / 1e6);
  s += line;
  if (shared_arena_bytes > arena_bytes) {
    std::snprintf(line, sizeof line, "  on the function's shared arena of %.2f MB (its largest shape's)\n",
                  shared_arena_bytes / 1e6);
    s += line;
  }
  for (const auto& p : passes) {
    std::snprintf(line, sizeof line, "  %-28s %6.2f ms  %4zu nodes  ", p.pass.c_str(), p.ms, p.nodes_after);
    s += line;
    s += p.summary.empty() ? "no change" : p.summary;
    s += "\n";
  }
  if (!on_cpu.empty()) {
    s += "  " + std::to_string(on_cpu.size()) + " node" + (on_cpu.size() == 1 ? "" : "s") +
         " run on the CPU, their data copied there and back:";
    for (const auto& n : on_cpu) s += "\n    " + n;
    s += "\n";
  }
  if (!recording.empty()) s += "  " + recording + "\n";
  return s;
}

std::string signature_of(const std::vector<Tensor>& inputs, const std::string& extra) {
  std::string s;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) s += ", ";
    s += inputs[i].defined() ? inputs[i].meta_str() : "none";
  }
  if (!extra.empty()) {
    s += " (";
    s += extra;
    s += ")";
  }
  return s;
}

// The device a graph runs on: its inputs' (or, without inputs, its
// parameters'). Its executor's arena is that backend's memory, and the
// kernels are its kernels, with the CPU's standing in, visibly, where it has
// none (across copies, as in eager mode).
static Device graph_device(const graph::Graph& g, const std::string& name) {
  Device device = cpu_device();
  bool found = false;
  for (int id : g.inputs)
    if (!found) device = g.values[id].meta.device, found = true;
  for (const auto& v : g.values)
    if (!found && v.kind == graph::ValueKind::Param) device = v.meta.device, found = true;
  for (int id : g.inputs)
    KILN_CHECK(g.values[id].meta.device == device, "the inputs of ", name, " are on ", device.str(), " and ",
               g.values[id].meta.device.str(), "; a compiled graph runs on one device: move them to one first");
  return device;
}

// Every value of g on `device`: parameters and constants copied there.
static void place_on(graph::Graph& g, Device device) {
  for (graph::Value& v : g.values) {
    v.meta.device = device;
    if (v.tensor.defined() && !(v.tensor.device() == device)) v.tensor = v.tensor.detach().to(device);
  }
}

void CompiledFunction::Impl::dump(const graph::Graph& g, int step, const std::string& stage) const {
  if (dump_dir.empty()) return;
  std::filesystem::create_directories(dump_dir);
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, ".%d.%02d-", compiles, step);
  std::string base = dump_dir + "/" + options.name + prefix + stage;
  write_file(base + ".txt", g.text());
  write_file(base + ".dot", g.dot());
}

namespace {

// The storages of a graph's parameters and constants.
std::set<const StorageImpl*> constant_storages(const graph::Graph& g) {
  std::set<const StorageImpl*> out;
  for (const graph::Value& v : g.values)
    if ((v.kind == graph::ValueKind::Constant || v.kind == graph::ValueKind::Param) && v.tensor.defined())
      out.insert(v.tensor.impl().storage.get());
  return out;
}

// The constants the passes made for this graph (weights reordered, packed
// or folded): not those it was traced with (parameters, a model's
// initializers), which outlive it.
std::map<const StorageImpl*, int64_t> derived_constants(const graph::Graph& g, const std::set<const StorageImpl*>& traced) {
  std::map<const StorageImpl*, int64_t> out;
  for (const StorageImpl* s : constant_storages(g))
    if (!traced.count(s)) out[s] = static_cast<int64_t>(s->nbytes);
  return out;
}

// The bytes the cached graphs' derived constants hold, each counted once.
int64_t derived_bytes(const std::list<CompiledFunction::Impl::Entry>& cache) {
  std::map<const StorageImpl*, int64_t> all;
  for (const auto& e : cache) all.insert(e.derived.begin(), e.derived.end());
  int64_t bytes = 0;
  for (const auto& [storage, n] : all) bytes += n;
  return bytes;
}

}  // namespace

std::vector<uint32_t> CompiledFunction::Impl::param_versions() const {
  std::vector<uint32_t> v;
  for (const auto& [name, t] : params) v.push_back(t.impl().storage->version.load());
  return v;
}

CompiledFunction::Impl::Entry& CompiledFunction::Impl::entry_for(const std::vector<Tensor>& inputs,
                                                                  std::vector<Tensor>* eager_outputs) {
  std::string extra = cell ? (cell->training() ? "train" : "eval") : "";
  std::string sig = signature_of(inputs, extra);
  bool weights_changed = false;
  std::string recompile_cause;
  for (auto it = cache.begin(); it != cache.end(); ++it) {
    if (it->signature != sig) continue;
    if (options.inference && it->versions != param_versions()) {
      cache.erase(it);  // the parameters folded into it have changed since: rebuild, no new shape
      weights_changed = true;
      break;
    }
    cache.splice(cache.end(), cache, it);  // the most recently used last (the list keeps the entry where it is)
    return cache.back();
  }
  std::string dynamic_change;
  const bool expected = !weights_changed && !cache.empty() &&
                        detail::only_dynamic_axes_differ(options.dynamic, cache.back().shapes, inputs, &dynamic_change);
  if (expected) recompile_cause = dynamic_change;
  if (!weights_changed && !expected && (!cache.empty() || compiles > 0)) {
    std::string why = "graph '" + options.name + "' is compiled again, for " + sig;
    if (!cache.empty()) why += " (cached: " + cache.back().signature + ")";
    why += "; each input shape needs its own graph. ";
    // Which axis changed tells the likely cause: a short last batch, or a length.
    std::string changed;
    if (!cache.empty() && cache.back().shapes.size() == inputs.size())
      for (size_t i = 0; i < inputs.size() && changed.empty(); ++i) {
        const Shape& was = cache.back().shapes[i];
        const Shape now = inputs[i].defined() ? inputs[i].shape() : Shape{};
        if (was.size() != now.size()) continue;
        for (size_t d = 1; d < now.size() && changed.empty(); ++d)
          if (was[d] != now[d])
            changed = "input " + std::to_string(i) + "'s axis " + std::to_string(d) + " went from " +
                      std::to_string(was[d]) + " to " + std::to_string(now[d]);
      }
    // The cause names the first axis that changed, the batch axis included.
    recompile_cause = changed;
    if (!cache.empty() && cache.back().shapes.size() == inputs.size())
      for (size_t i = 0; i < inputs.size() && recompile_cause.empty(); ++i) {
        const Shape& was = cache.back().shapes[i];
        const Shape now = inputs[i].defined() ? inputs[i].shape() : Shape{};
        if (was.size() == now.size() && !now.empty() && was[0] != now[0])
          recompile_cause = "input " + std::to_string(i) + "'s axis 0 went from " + std::to_string(was[0]) + " to " +
                            std::to_string(now[0]);
      }
    if (recompile_cause.empty()) recompile_cause = "a new input signature (" + sig + ")";
    if (!changed.empty()) {
      why += changed + ": a length that varies compiles once per length, and a loop over it in " +
             std::string(in_caller_language("C++", "Python")) +
             " is unrolled once per traced length. Pad or bucket the lengths to a few sizes, pass a length that "
             "only steers the loop as an int argument, or use nn.LSTM/GRU/RNN, which loop inside one op";
    } else {
      why += "If a smaller last batch causes it, leave it out: ";
      why += in_caller_language("drop_remainder: true in a recipe, or the drop_remainder argument of BatchIterator "
                                "and Pipeline::batch",
                                "dataset.batch(size, drop_remainder=True)");
    }
    KILN_CHECK(options.recompile != RecompilePolicy::Error, why, " (RecompilePolicy::Error turned this into an error)");
    if (options.recompile == RecompilePolicy::Log) std::fprintf(stderr, "kiln: %s\n", why.c_str());
  }
  if (weights_changed) recompile_cause = "the weights folded into it changed";
  if (!weights_changed)
    if (Entry* made = instantiated(inputs, sig, extra)) return *made;
  auto t0 = std::chrono::steady_clock::now();
  Entry e;
  e.signature = sig;
  e.report.compile = compiles + 1;
  e.report.cause = recompile_cause;
  for (const Tensor& t : inputs) e.shapes.push_back(t.defined() ? t.shape() : Shape{});
  e.report.signature = sig;
  graph::Graph g = optimized(inputs, eager_outputs, e.report, &e.derived, true);
  const Device device = graph_device(g, options.name);
  generalize(g, device, inputs, extra, e);
  auto tq = std::chrono::steady_clock::now();
  if (!arena) arena = std::make_shared<graph::SharedArena>(device);
  e.exec = std::make_unique<graph::Executable>(std::move(g), device, arena);
  // The trace's intermediates sit in the allocator's cache now; the graph runs
  // from its arena and will not ask for them, so give the memory back.
  cpu_allocator_release_cache();
  e.report.prepare_ms = ms_since(tq);
  e.report.final_nodes = e.exec->graph().nodes.size();
  e.report.kernels = e.exec->kernels();
  e.report.on_cpu = e.exec->on_cpu();
  e.report.arena_bytes = e.exec->plan().arena_bytes;
  e.report.unshared_bytes = e.exec->plan().unshared_bytes;
  e.report.total_ms = ms_since(t0);
  if (options.inference) e.versions = param_versions();
  ++compiles;
  for (Symbolic& made : symbolics)
    if (made.report.compile == e.report.compile) made.report = e.report;
  if (profiler::detail::active()) {  // the profile counts the compiles it saw, and says what caused each
    profiler::Record r;
    r.name = options.name;
    r.type = "compile";
    r.shapes = e.report.cause.empty() ? "its first call, for " + sig : e.report.cause;
    r.duration_ns = static_cast<int64_t>(e.report.total_ms * 1e6);
    r.start_ns = profiler::detail::now_ns() - r.duration_ns;
    profiler::detail::record_op(std::move(r));
  }
  return keep(std::move(e));
}

// Room for a new graph: the least recently used go first, while there are
// too many or their derived constants outgrow the budget.
CompiledFunction::Impl::Entry& CompiledFunction::Impl::keep(Entry e) {
  cache.push_back(std::move(e));
  while (cache.size() > 1 &&
         (cache.size() > options.max_cached_graphs || derived_bytes(cache) > options.max_cached_constant_bytes)) {
    if (last == &cache.front()) last = nullptr;
    cache.pop_front();
  }
  return cache.back();
}

graph::Graph CompiledFunction::Impl::optimized(const std::vector<Tensor>& inputs, std::vector<Tensor>* eager_outputs,
                                               CompileReport& report, std::map<const StorageImpl*, int64_t>* derived,
                                               bool dumps) {
  auto t0 = std::chrono::steady_clock::now();
  // Traced on the CPU for its device: what decomposes there is traced as its ops.
  struct TraceTarget {
    const DeviceType before = kiln::detail::t_trace_target;
    explicit TraceTarget(DeviceType target) { kiln::detail::t_trace_target = target; }
    ~TraceTarget() { kiln::detail::t_trace_target = before; }
  };
  graph::Graph g = [&] {
    const TraceTarget target(options.device ? options.device->type : DeviceType::CPU);
    return graph::detail::trace(fn, inputs, names, options.device ? nullptr : eager_outputs);
  }();
  if (options.device) {
    KILN_CHECK(options.inference || std::none_of(g.values.begin(), g.values.end(), [](const graph::Value& v) {
                 return v.kind == graph::ValueKind::Param;
               }),
               "CompileOptions::device places inference graphs (whose parameters are folded as constants); to train ",
               options.name, " on ", options.device->str(), ", move its Cell there with Cell::to and its inputs with Tensor::to");
    place_on(g, *options.device);
  }
  report.trace_ms = ms_since(t0);
  report.traced_nodes = g.live_nodes();
  const std::set<const StorageImpl*> traced_constants = constant_storages(g);
  const Device device = graph_device(g, options.name);
  int step = 0;
  if (dumps) dump(g, step, "traced");
  ++step;
  if (options.inference)
    for (auto& v : g.values)
      if (v.kind == graph::ValueKind::Param) v.kind = graph::ValueKind::Constant;
  auto tp = std::chrono::steady_clock::now();
  if (options.optimize) {
    std::vector<std::pair<const char*, graph::PassFn>> pipeline;
    auto add = [&](const std::vector<graph::Pass>& passes) {
      for (const graph::Pass& p : passes)
        if (p.when == graph::Pass::Always || (p.when == graph::Pass::Inference) == options.inference)
          pipeline.push_back({p.name, p.run});
    };
    add(graph::generic_passes());
    const size_t first_backend_pass = pipeline.size();
    add(graph::backend_passes(device.type));
    pipeline.push_back({"dead code (final)", graph::plain<graph::eliminate_dead_code>});
    const bool dynamic_batch = std::any_of(options.dynamic.begin(), options.dynamic.end(),
                                           [](const DynamicAxis& a) { return a.axis == 0 && a.buckets.empty(); });
    const graph::PassOptions pass_options{options.timed_choices, dynamic_batch};
    for (size_t i = 0; i < pipeline.size(); ++i) {
      const auto& [name, pass] = pipeline[i];
      auto ts = std::chrono::steady_clock::now();
      std::string summary = pass(g, pass_options);
      if (i >= first_backend_pass)  // the kernels it made are its backend's
        for (auto& n : g.nodes)
          if (n.custom && !n.made_by) n.made_by = device.type;
      report.passes.push_back({name, summary, g.live_nodes(), ms_since(ts)});
      if (dumps && !summary.empty()) dump(g, step, name);
      ++step;
    }
  }
  report.passes_ms = ms_since(tp);
  if (derived) *derived = derived_constants(g, traced_constants);
  return g;
}

const std::vector<Tensor>& CompiledFunction::Impl::run(const std::vector<Tensor>& given) {
  const detail::Bucketed call = detail::pad_to_buckets(options.dynamic, given);
  std::vector<Tensor> eager;
  Entry& e = entry_for(call.inputs, &eager);
  last = &e;
  const std::vector<Tensor>* results = nullptr;
  if (!eager.empty()) {  // this call traced the program, which computed the results eagerly
    traced_results = std::move(eager);
    results = &traced_results;
  } else {
    traced_results.clear();
    results = &e.exec->run(call.inputs);
  }
  if (call.padded.empty()) return *results;
  cut_results = detail::cut_to_sizes(call, *results);
  return cut_results;
}

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor>& inputs) {
  const auto& outs = impl_->run(inputs);
  std::vector<Tensor> owned;
  owned.reserve(outs.size());
  for (const Tensor& t : outs) owned.push_back(impl_->traced_results.empty() ? t.clone() : t);
  return owned;
}

const std::vector<Tensor>& CompiledFunction::run_borrowed(const std::vector<Tensor>& inputs) { return impl_->run(inputs); }

const std::vector<Tensor>& CompiledFunction::input_slots(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
  KILN_CHECK(shapes.size() == dtypes.size(), "input_slots: ", shapes.size(), " shapes but ", dtypes.size(), " dtypes");
  std::vector<Tensor> examples;
  for (size_t i = 0; i < shapes.size(); ++i) examples.push_back(zeros(shapes[i], dtypes[i]));
  std::vector<Tensor> eager;
  impl_->last = &impl_->entry_for(examples, &eager);
  impl_->traced_results.clear();
  return impl_->last->exec->input_slots();
}

const std::vector<Tensor>& CompiledFunction::run_slots() {
  KILN_CHECK(impl_->last, "run_slots(): call input_slots() first");
  return impl_->last->exec->run_slots();
}

const CompileReport& CompiledFunction::report() const {
  KILN_CHECK(impl_->last, "report(): nothing compiled yet");
  impl_->last->report.shared_arena_bytes = impl_->arena ? static_cast<int64_t>(impl_->arena->bytes()) : 0;
  impl_->last->report.recording = impl_->last->exec->recording();
  return impl_->last->report;
}
std::string CompiledFunction::graph_text() const {
  KILN_CHECK(impl_->last, "graph_text(): nothing compiled yet");
  return impl_->last->exec->graph().text();
}
std::string CompiledFunction::graph_dot() const {
  KILN_CHECK(impl_->last, "graph_dot(): nothing compiled yet");
  return impl_->last->exec->graph().dot();
}
int CompiledFunction::compiles() const { return impl_->compiles; }

std::shared_ptr<CompiledFunction::Impl> make_impl(Function fn, CompileOptions options, std::optional<CapturedCell> cell) {
  auto impl = std::make_shared<CompiledFunction::Impl>();
  impl->fn = std::move(fn);
  impl->options = std::move(options);
  impl->cell = std::move(cell);
  const char* env = std::getenv("KILN_DUMP_GRAPH");
  impl->dump_dir = env && *env ? env : impl->options.dump_dir;
  impl->names.root_type = impl->cell ? impl->cell->type_name : "function";
  if (impl->cell) {
    for (const auto& [name, t] : impl->cell->tensors) {
      impl->names.params[t.impl().storage.get()] = name;
      impl->params.emplace_back(name, t);
    }
    for (const auto& [path, type, address] : impl->cell->cells) {
      impl->names.cell_types[path] = type;
      impl->names.cell_paths[address] = path;
    }
  }
  return impl;
}

CompiledFunction compile(Function fn, const std::vector<Tensor>& example_inputs, CompileOptions options) {
  auto impl = make_impl(std::move(fn), std::move(options));
  if (!example_inputs.empty()) impl->run(example_inputs);
  return CompiledFunction(impl);
}

}  // namespace jit
}  // namespace kiln

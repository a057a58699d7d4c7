// Compiled functions over symbolic dimensions: a compile with dynamic axes
// (CompileOptions::dynamic, no buckets) probes other sizes of them and, where
// the graphs agree but for the sizes (symbolic_shapes.h), later sizes take
// the same graph with the sizes worked out: no tracing, no passes, one
// compile for every size.
#include <algorithm>
#include <chrono>

#include "graph/compiled.h"
#include "graph/dynamic_axes.h"
#include "kiln/functional.h"

namespace kiln::jit {
namespace {

// x with axis `axis` grown by `more`, the new positions copies of its first.
Tensor grown(const Tensor& x, int axis, int64_t more) {
  std::vector<Tensor> parts = {x};
  for (int64_t i = 0; i < more; ++i) parts.push_back(x.slice(axis, 0, 1));
  return concat(parts, axis);
}

std::string sizes_str(const std::vector<int64_t>& sizes) {
  std::string s;
  for (int64_t v : sizes) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

}  // namespace

std::vector<std::pair<int, int>> CompiledFunction::Impl::symbols() const {
  std::vector<std::pair<int, int>> out;
  for (const DynamicAxis& a : options.dynamic) {
    if (!a.buckets.empty()) return {};  // padded to buckets: a graph per bucket, as asked
    const std::pair<int, int> axis{a.input, a.axis};
    if (std::find(out.begin(), out.end(), axis) == out.end()) out.push_back(axis);
  }
  return out;
}

void CompiledFunction::Impl::generalize(const graph::Graph& g, Device device, const std::vector<Tensor>& inputs,
                                        const std::string& extra, Entry& e) {
  const std::vector<std::pair<int, int>> axes = symbols();
  if (axes.empty() || options.device) return;
  auto refuse = [&](const std::string& why) { e.report.symbolic = "compiled for these sizes only: " + why; };
  for (const graph::Node& n : g.nodes) {
    if (g.has_side_effects(n))  // probing runs the function: it must change nothing
      return refuse("it writes state (" + n.name() + "), so other sizes are not probed");
    if (!n.removed && n.custom && !n.any_shape)  // known before probing: spare the probes' compiles
      return refuse("the kernel of " + n.name() + " is built for one shape");
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> base;
  for (auto [input, axis] : axes) base.push_back(inputs[static_cast<size_t>(input)].shape()[static_cast<size_t>(axis)]);
  // One probe per symbol, that symbol one larger; a check with all of them two larger.
  auto probe = [&](int symbol, int64_t more) {
    std::vector<Tensor> at = inputs;
    for (size_t i = 0; i < axes.size(); ++i)
      if (symbol < 0 || static_cast<size_t>(symbol) == i)
        at[static_cast<size_t>(axes[i].first)] = grown(at[static_cast<size_t>(axes[i].first)], axes[i].second, more);
    CompileReport ignored;
    return optimized(at, nullptr, ignored, nullptr, false);
  };
  std::vector<graph::Graph> probes;
  for (size_t i = 0; i < axes.size(); ++i) probes.push_back(probe(static_cast<int>(i), 1));
  const graph::Graph check = probe(-1, 2);
  std::vector<const graph::Graph*> views;
  for (const graph::Graph& p : probes) views.push_back(&p);
  std::string why;
  std::optional<graph::SymbolicShapes> shapes = graph::generalize(g, base, views, check, &why);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!shapes) return refuse(why);
  Symbolic made;
  made.axes = axes;
  for (const Tensor& t : inputs) made.dtypes.push_back(t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt);
  made.base_shapes = e.shapes;
  made.extra = extra;
  made.graph = g;
  made.shapes = std::move(*shapes);
  made.device = device;
  if (options.inference) made.versions = param_versions();
  made.derived = e.derived;
  symbolic = std::move(made);
  char line[160];
  std::snprintf(line, sizeof line, "symbolic in %zu dynamic ax%s (probed %zu other sizes in %.1f ms): later sizes reuse it",
                axes.size(), axes.size() == 1 ? "is" : "es", probes.size() + 1, ms);
  e.report.symbolic = line;
  symbolic->report = e.report;
}

CompiledFunction::Impl::Entry* CompiledFunction::Impl::instantiated(const std::vector<Tensor>& inputs,
                                                                     const std::string& sig, const std::string& extra) {
  if (!symbolic || symbolic->extra != extra || inputs.size() != symbolic->dtypes.size()) return nullptr;
  if (options.inference && symbolic->versions != param_versions()) {  // the weights folded into it changed
    symbolic.reset();
    return nullptr;
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() != symbolic->dtypes[i].has_value() ||
        (inputs[i].defined() && inputs[i].dtype() != *symbolic->dtypes[i]))
      return nullptr;
  std::string change;
  if (!detail::only_dynamic_axes_differ(options.dynamic, symbolic->base_shapes, inputs, &change)) return nullptr;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> sizes;
  for (auto [input, axis] : symbolic->axes)
    sizes.push_back(inputs[static_cast<size_t>(input)].shape()[static_cast<size_t>(axis)]);
  std::string why;
  std::optional<graph::Graph> g = graph::instantiate(symbolic->graph, symbolic->shapes, sizes, &why);
  if (!g) {
    symbolic->report.symbolic = "not at sizes " + sizes_str(sizes) + ": " + why;
    return nullptr;  // compiled for these sizes instead
  }
  Entry e;
  e.signature = sig;
  for (const Tensor& t : inputs) e.shapes.push_back(t.defined() ? t.shape() : Shape{});
  e.report = symbolic->report;
  e.report.signature = sig;
  e.report.cause = change;
  e.report.instantiated = true;
  e.report.symbolic = "instantiated from compile " + std::to_string(symbolic->report.compile) + " at sizes " +
                      sizes_str(sizes) + ", with no tracing or passes";
  e.report.trace_ms = e.report.passes_ms = 0;
  if (!arena) arena = std::make_shared<graph::SharedArena>(symbolic->device);
  e.exec = std::make_unique<graph::Executable>(std::move(*g), symbolic->device, arena);
  e.versions = symbolic->versions;
  e.derived = symbolic->derived;
  e.report.prepare_ms = e.report.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  e.report.kernels = e.exec->kernels();
  e.report.arena_bytes = e.exec->plan().arena_bytes;
  e.report.unshared_bytes = e.exec->plan().unshared_bytes;
  return &keep(std::move(e));
}

}  // namespace kiln::jit

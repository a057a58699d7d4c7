// Compiled functions over symbolic dimensions: a compile with dynamic axes
// (CompileOptions::dynamic, no buckets) probes other sizes of them and, where
// the graphs agree but for the sizes (symbolic_shapes.h), later sizes take
// the same graph with the sizes worked out: no tracing, no passes, one
// compile for every size.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "graph/compiled.h"
#include "graph/dynamic_axes.h"
#include "kiln/allocator.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/generator.h"

namespace kiln::jit {
namespace {

// x with axis `axis` resized by `more`: cut (its first positions kept), or
// grown (the new positions copies of its last, real values as the function
// expects them; zeros where the axis is empty, as an empty cache grows).
Tensor resized(const Tensor& x, int axis, int64_t more) {
  const int64_t size = x.shape()[static_cast<size_t>(axis)];
  if (more < 0) return x.slice(axis, 0, size + more).contiguous();
  std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - axis)), 0);  // last axis first, (before, after)
  pads.back() = more;
  return pad(x, pads, size > 0 ? "replicate" : "constant");
}

std::string sizes_str(const std::vector<int64_t>& sizes) {
  std::string s;
  for (int64_t v : sizes) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

}  // namespace

std::vector<std::vector<std::pair<int, int>>> CompiledFunction::Impl::symbols(const std::vector<Tensor>& inputs) const {
  std::vector<std::vector<std::pair<int, int>>> out;
  std::vector<int64_t> sizes;
  for (const DynamicAxis& a : options.dynamic) {
    if (!a.buckets.empty()) return {};  // padded to buckets: a graph per bucket, as asked
    const std::pair<int, int> axis{a.input, a.axis};
    const int64_t size = inputs[static_cast<size_t>(a.input)].shape()[static_cast<size_t>(a.axis)];
    auto same = std::find(sizes.begin(), sizes.end(), size);
    if (same == sizes.end()) {
      sizes.push_back(size);
      out.push_back({axis});
    } else if (auto& group = out[static_cast<size_t>(same - sizes.begin())];
               std::find(group.begin(), group.end(), axis) == group.end()) {
      group.push_back(axis);
    }
  }
  return out;
}

void CompiledFunction::Impl::generalize(const graph::Graph& g, Device device, const std::vector<Tensor>& inputs,
                                        const std::string& extra, Entry& e) {
  if (options.device) return;
  // Axes of one size are one symbol (a batch's inputs and labels), probed
  // together, and later sizes must keep them equal.
  const std::vector<std::vector<std::pair<int, int>>> axes = symbols(inputs);
  if (axes.empty()) return;
  // A refusal found by probing twice is kept (later compiles would find it
  // again, at the price of their probes); the first may be the compile's own
  // sizes' (a slice that is all of what it slices traces as that whole).
  auto refuse = [&](const std::string& why, bool probed = false) {
    if (probed && ++probed_refusals >= 2) symbolic_refusal = why;
    e.report.symbolic = "compiled for these sizes only: " + why;
  };
  if (!symbolic_refusal.empty()) {
    e.report.symbolic = "compiled for these sizes only (as an earlier compile found): " + symbolic_refusal;
    return;
  }
  // Probing runs the function: what it writes (a training step's weights,
  // optimizer state and running statistics) is copied first and put back
  // after, and so is the random stream; a collective would talk to other
  // processes, so such a graph is not probed.
  std::vector<std::pair<Tensor, Tensor>> written;  // (the live tensor, its copy)
  std::set<const StorageImpl*> seen;
  for (const graph::Node& n : g.nodes) {
    if (n.removed) continue;
    const OpDef* op = n.op ? n.op : n.fused_from;
    if (op && op->has_tag(kTagCollective)) return refuse("it talks to other processes (" + n.name() + ")");
    if (n.custom && !n.any_shape)  // known before probing: spare the probes' compiles
      return refuse("the kernel of " + n.name() + " is built for one shape");
    for (int id : graph::written_inputs(n)) {
      // Through views to what they view (a slice of a parameter that is all of it).
      const graph::Value* v = &g.values[static_cast<size_t>(id)];
      while (v->kind == graph::ValueKind::Result && g.nodes[static_cast<size_t>(v->producer)].is_view())
        v = &g.values[static_cast<size_t>(g.nodes[static_cast<size_t>(v->producer)].inputs[0])];
      if (v->kind != graph::ValueKind::Param || !v->tensor.defined())
        return refuse(n.name() + " writes into a value of its own graph");
      if (seen.insert(v->tensor.impl().storage.get()).second) written.push_back({v->tensor, v->tensor.detach().clone()});
    }
  }
  Generator& generator = default_generator();
  const uint64_t seed = generator.initial_seed(), offset = generator.offset();
  struct PutBack {  // also when a probe throws
    std::vector<std::pair<Tensor, Tensor>>& written;
    Generator& generator;
    uint64_t seed, offset;
    ~PutBack() {
      NoGradGuard no_grad;
      for (auto& [live, copy] : written) live.copy_(copy);
      generator.set_state(seed, offset);
    }
  } put_back{written, generator, seed, offset};
  auto t0 = std::chrono::steady_clock::now();
  auto size_of = [&](const std::vector<std::pair<int, int>>& group) {
    return inputs[static_cast<size_t>(group[0].first)].shape()[static_cast<size_t>(group[0].second)];
  };
  // One probe per symbol, that symbol one smaller (larger where a size is 2
  // or less); a check with all of them moved twice as far. Smaller, a
  // probe's trace fits in the memory the compile's own took. Probes are kept
  // by the symbols they move, for a second attempt over fewer of them.
  const int64_t step =
      std::all_of(axes.begin(), axes.end(), [&](const auto& group) { return size_of(group) > 2; }) ? -1 : 1;
  std::map<std::pair<std::vector<size_t>, int64_t>, graph::Graph> probed;
  auto probe = [&](const std::vector<size_t>& moved, int64_t more) -> const graph::Graph& {
    const auto key = std::make_pair(moved, more);
    if (auto it = probed.find(key); it != probed.end()) return it->second;
    std::vector<Tensor> at = inputs;
    for (size_t i : moved)
      for (auto [input, axis] : axes[i])
        at[static_cast<size_t>(input)] = resized(at[static_cast<size_t>(input)], axis, more);
    CompileReport ignored;
    // The trace before it left its intermediates in the allocator's cache:
    // give them back, so that probing adds no more than one trace to the peak.
    cpu_allocator_release_cache();
    return probed.emplace(key, optimized(at, nullptr, ignored, nullptr, false)).first->second;
  };
  // The graph over the `chosen` symbols (the others kept at their sizes), or why not.
  auto attempt = [&](const std::vector<size_t>& chosen, std::string* why) -> std::optional<graph::SymbolicShapes> {
    std::vector<int64_t> base;
    std::vector<const graph::Graph*> views;
    const graph::Graph* check = nullptr;
    try {
      for (size_t i : chosen) {
        base.push_back(size_of(axes[i]));
        views.push_back(&probe({i}, step));
      }
      check = &probe(chosen, 2 * step);
    } catch (const std::exception& error) {  // the function refuses other sizes
      *why = std::string("it does not run at other sizes of them: ") + error.what();
      return std::nullopt;
    }
    return graph::generalize(g, base, step, views, *check, why);
  };
  std::vector<size_t> all(axes.size()), larger;
  for (size_t i = 0; i < axes.size(); ++i) {
    all[i] = i;
    if (size_of(axes[i]) != 1) larger.push_back(i);
  }
  std::vector<size_t> chosen = all;
  std::string why;
  std::optional<graph::SymbolicShapes> shapes = attempt(all, &why);
  // A size of 1 is special to views and broadcasts (a transpose over it is
  // no copy, a reshape back to it folds away), so a graph traced there often
  // differs from one at 2: keep such symbols as they are and generalize over
  // the others (one decoded token over a growing cache).
  if (!shapes && !larger.empty() && larger.size() < all.size()) {
    std::string why_larger;
    shapes = attempt(larger, &why_larger);
    if (shapes) chosen = larger;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!shapes) return refuse(why, true);
  Symbolic made;
  for (size_t i : chosen) made.axes.push_back(axes[i]);
  for (const Tensor& t : inputs) made.dtypes.push_back(t.defined() ? std::optional<DType>(t.dtype()) : std::nullopt);
  made.base_shapes = e.shapes;
  made.extra = extra;
  made.graph = g;
  made.shapes = std::move(*shapes);
  made.device = device;
  if (options.inference) made.versions = param_versions();
  made.derived = e.derived;
  char line[200];
  std::snprintf(line, sizeof line,
                "symbolic in %zu dynamic ax%s%s (probed %zu other sizes in %.1f ms): later sizes reuse it",
                chosen.size(), chosen.size() == 1 ? "is" : "es",
                chosen.size() < axes.size() ? " (those of size 1 kept)" : "", probed.size(), ms);
  e.report.symbolic = line;
  made.report = e.report;
  // A few graphs are kept (a prompt's and a decoded token's take turns), the newest first.
  symbolics.push_front(std::move(made));
  if (symbolics.size() > kMaxSymbolic) symbolics.pop_back();
}

CompiledFunction::Impl::Entry* CompiledFunction::Impl::instantiated(const std::vector<Tensor>& inputs,
                                                                     const std::string& sig, const std::string& extra) {
  if (options.inference && !symbolics.empty()) {  // drop those whose folded weights changed since
    const std::vector<uint32_t> now = param_versions();
    symbolics.remove_if([&](const Symbolic& s) { return s.versions != now; });
  }
  for (auto it = symbolics.begin(); it != symbolics.end(); ++it)
    if (Entry* e = instantiated_from(*it, inputs, sig, extra)) {
      symbolics.splice(symbolics.begin(), symbolics, it);
      return e;
    }
  return nullptr;
}

CompiledFunction::Impl::Entry* CompiledFunction::Impl::instantiated_from(Symbolic& symbolic,
                                                                         const std::vector<Tensor>& inputs,
                                                                         const std::string& sig,
                                                                         const std::string& extra) {
  if (symbolic.extra != extra || inputs.size() != symbolic.dtypes.size()) return nullptr;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() != symbolic.dtypes[i].has_value() ||
        (inputs[i].defined() && inputs[i].dtype() != *symbolic.dtypes[i]))
      return nullptr;
  // Only its symbols' axes may differ from the sizes it was compiled at.
  std::vector<DynamicAxis> generalized;
  for (const auto& group : symbolic.axes)
    for (auto [input, axis] : group) generalized.push_back({input, axis});
  std::string change;
  bool as_compiled = true;  // the sizes it was compiled at, whose graph has been dropped since
  for (size_t i = 0; i < inputs.size(); ++i)
    as_compiled = as_compiled && (inputs[i].defined() ? inputs[i].shape() : Shape{}) == symbolic.base_shapes[i];
  if (as_compiled) change = "its graph was dropped; the sizes it was compiled at";
  if (!as_compiled && !detail::only_dynamic_axes_differ(generalized, symbolic.base_shapes, inputs, &change))
    return nullptr;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> sizes;
  for (const auto& group : symbolic.axes) {
    const auto size_of = [&](std::pair<int, int> a) {
      return inputs[static_cast<size_t>(a.first)].shape()[static_cast<size_t>(a.second)];
    };
    for (const auto& a : group)
      if (size_of(a) != size_of(group[0])) return nullptr;  // axes that were one symbol differ now: compile
    // A size of 1 compiles a graph of its own (one decoded token's, whose
    // transposes over it are no copies), as it was kept when compiled there.
    if (size_of(group[0]) == 1 &&
        symbolic.base_shapes[static_cast<size_t>(group[0].first)][static_cast<size_t>(group[0].second)] != 1)
      return nullptr;
    sizes.push_back(size_of(group[0]));
  }
  std::string why;
  std::optional<graph::Graph> g = graph::instantiate(symbolic.graph, symbolic.shapes, sizes, &why);
  if (!g) {
    symbolic.report.symbolic = "not at sizes " + sizes_str(sizes) + ": " + why;
    return nullptr;  // compiled for these sizes instead
  }
  Entry e;
  e.signature = sig;
  for (const Tensor& t : inputs) e.shapes.push_back(t.defined() ? t.shape() : Shape{});
  e.report = symbolic.report;
  e.report.signature = sig;
  e.report.cause = change;
  e.report.instantiated = true;
  e.report.symbolic = "instantiated from compile " + std::to_string(symbolic.report.compile) + " at sizes " +
                      sizes_str(sizes) + ", with no tracing or passes";
  e.report.trace_ms = e.report.passes_ms = 0;
  if (!arena) arena = std::make_shared<graph::SharedArena>(symbolic.device);
  e.exec = std::make_unique<graph::Executable>(std::move(*g), symbolic.device, arena);
  e.versions = symbolic.versions;
  e.derived = symbolic.derived;
  e.report.prepare_ms = e.report.total_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  e.report.kernels = e.exec->kernels();
  e.report.arena_bytes = e.exec->plan().arena_bytes;
  e.report.unshared_bytes = e.exec->plan().unshared_bytes;
  return &keep(std::move(e));
}

}  // namespace kiln::jit

#pragma once
// The state behind a jit::CompiledFunction (shared with the training step).
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <tuple>

#include "graph/executor.h"
#include "graph/symbolic_shapes.h"
#include "graph/tracer.h"
#include "kiln/jit.h"

namespace kiln::jit {

std::string signature_of(const std::vector<Tensor>& inputs, const std::string& extra);

// What graph mode knows of the Cell it compiles, described by the nn layer
// (which sits above this one): its parameters and buffers by name, its Cells'
// paths and types, and its train/eval mode (part of a graph's signature).
struct CapturedCell {
  std::shared_ptr<void> owner;  // keeps the Cell alive
  std::string type_name;
  std::vector<std::pair<std::string, Tensor>> tensors;                   // parameters, then buffers
  std::vector<std::tuple<std::string, std::string, const void*>> cells;  // path, type, the Cell
  std::function<bool()> training;
};

struct CompiledFunction::Impl {
  struct Entry {
    std::string signature;
    std::vector<Shape> shapes;  // of the inputs it was traced on: a recompile names the axis that changed
    std::unique_ptr<graph::Executable> exec;
    CompileReport report;
    std::vector<uint32_t> versions;  // inference graphs: the parameters' versions they were built on
    // The constants the passes made for it (reordered, packed, folded
    // weights): their storages and sizes, some shared with other shapes' graphs.
    std::map<const StorageImpl*, int64_t> derived;
  };
  Function fn;
  CompileOptions options;
  std::optional<CapturedCell> cell;
  graph::detail::CaptureNames names;
  std::vector<std::pair<std::string, Tensor>> params;
  std::string dump_dir;
  std::list<Entry> cache;  // least recently used first
  // One arena for every cached graph: they run one at a time.
  std::shared_ptr<graph::SharedArena> arena;
  Entry* last = nullptr;
  int compiles = 0;
  // The last compiles generalized over the dynamic axes (symbolic_shapes.h),
  // the most recently used first: a new size of a graph's symbols (its
  // other axes as it was compiled) instantiates it instead of compiling.
  struct Symbolic {
    std::vector<std::vector<std::pair<int, int>>> axes;  // per symbol: its (input, axis), all of one size
    std::vector<std::optional<DType>> dtypes;  // the compile's inputs' (none: an omitted one)
    std::vector<Shape> base_shapes;           // and their shapes
    std::string extra;                        // train/eval
    graph::Graph graph;                       // as optimized, before the executor took it
    graph::SymbolicShapes shapes;
    Device device;
    CompileReport report;
    std::vector<uint32_t> versions;
    std::map<const StorageImpl*, int64_t> derived;
  };
  std::list<Symbolic> symbolics;
  static constexpr size_t kMaxSymbolic = 4;
  // Why an earlier compile could not be generalized: later ones are not
  // probed again (a graph whose constants follow the sizes keeps doing so).
  std::string symbolic_refusal;
  int probed_refusals = 0;
  std::vector<Tensor> traced_results;
  std::vector<Tensor> cut_results;  // a padded call's outputs, cut back to its sizes (views)

  Entry& entry_for(const std::vector<Tensor>& inputs, std::vector<Tensor>* eager_outputs);
  // Traces and optimizes a graph for these inputs (compile.cpp).
  graph::Graph optimized(const std::vector<Tensor>& inputs, std::vector<Tensor>* eager_outputs, CompileReport& report,
                         std::map<const StorageImpl*, int64_t>* derived, bool dumps);
  Entry& keep(Entry e);
  // compile_symbolic.cpp: the symbols of options.dynamic; generalizing a
  // fresh compile by probing other sizes; a graph for new sizes from it.
  std::vector<std::vector<std::pair<int, int>>> symbols(const std::vector<Tensor>& inputs) const;
  void generalize(const graph::Graph& g, Device device, const std::vector<Tensor>& inputs, const std::string& extra,
                  Entry& e);
  Entry* instantiated(const std::vector<Tensor>& inputs, const std::string& sig, const std::string& extra);
  Entry* instantiated_from(Symbolic& symbolic, const std::vector<Tensor>& inputs, const std::string& sig,
                           const std::string& extra);
  const std::vector<Tensor>& run(const std::vector<Tensor>& inputs);
  void dump(const graph::Graph& g, int step, const std::string& stage) const;
  std::vector<uint32_t> param_versions() const;
};

std::shared_ptr<CompiledFunction::Impl> make_impl(Function fn, CompileOptions options,
                                                  std::optional<CapturedCell> cell = std::nullopt);

}  // namespace kiln::jit

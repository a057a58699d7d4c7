#pragma once
// The graph IR: values (inputs, captured parameters and constants, op
// results) and nodes (one registered op each, or a fused kernel), kept in
// execution order. Tracing builds it; passes rewrite it; the executor runs it.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kiln/registry.h"

namespace kiln::graph {

enum class ValueKind {
  Input,     // bound to the caller's tensor on every run
  Param,     // a live captured tensor (parameter or buffer): read when the graph runs
  Constant,  // a captured tensor whose value is fixed when the graph is compiled
  Result,    // produced by a node
};

struct Value {
  ValueKind kind = ValueKind::Result;
  TensorMeta meta;
  Tensor tensor;        // Param and Constant: the captured tensor
  int producer = -1;    // Result: index of the node
  int output_index = 0;
  std::string name;     // parameter name, "input0", ... (for dumps)
  // A constant a pass derived from captured tensors: those tensors (not kept
  // alive for this) and the derivations from them, so that deriving again
  // from this one is shared between graphs too (see derived_constants.h).
  std::vector<std::weak_ptr<TensorImpl>> derived_roots;
  std::string derivation;
  // How its bytes are arranged when not as the plain row-major tensor its
  // shape says: a backend's layout ("nChw16c": channels in blocks of 16),
  // set by the backend pass that chose it. Empty: plain.
  std::string layout;
};

// A kernel that is not a registry op (fused elementwise chains, fused updates).
using CustomKernel = std::function<void(const std::vector<Tensor>& in, std::vector<Tensor>& out)>;

struct Node {
  const OpDef* op = nullptr;  // null for custom kernels
  Attrs attrs;
  std::vector<int> inputs;    // value ids; -1 for an omitted optional input
  std::vector<int> outputs;   // value ids
  CustomKernel custom;
  std::string label;          // custom kernels: what they compute, for dumps and profiles
  // A custom kernel that computes a registry op with more work fused into
  // it names that op here, and what was fused as bool attributes in `attrs`
  // ("fused_residual", "fused_relu"): later passes recognise it by these,
  // never by its label.
  const OpDef* fused_from = nullptr;
  // The input whose buffer the output may reuse when that input dies here (a
  // kernel that accumulates into its output, like a residual add); -1: none.
  int inplace_input = -1;
  // A custom kernel is some backend's code: the backend whose passes made it
  // (a registry op runs on whichever backend the graph is placed on).
  std::optional<DeviceType> made_by;
  // A custom kernel that takes every size from its tensors when it runs, so
  // that it runs on other shapes of them too (symbolic_shapes.h); false for
  // one built for a shape (a library primitive made at compile time).
  bool any_shape = false;
  // With any_shape, where it holds only at some shapes: whether it runs at
  // these (checked when a symbolic graph is instantiated; null: at any).
  std::function<bool(const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out)> runs_at;
  bool removed = false;

  std::string name() const { return op ? op->name : label; }
  // Whether this is the registry op op_name itself (not a custom kernel).
  bool is_op(const char* op_name) const { return !removed && op && op->name == op_name; }
  bool is_view() const { return op && op->has_tag(kTagView); }
  // The op itself, or a custom kernel standing for it (see fused_from).
  bool computes(const char* op_name) const {
    const OpDef* d = op ? op : fused_from;
    return !removed && d && d->name == op_name;
  }
  bool fused(const char* what) const { return fused_from && attrs.get_bool(what, false); }
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;
  std::vector<int> outputs;

  int add_value(Value v);
  // Nodes that must run even when no output is used: writes into captured
  // tensors (assign, batch_norm's running statistics) and draws from the generator.
  bool has_side_effects(const Node& n) const;
  // Value ids written in place by some node (their reads cannot be merged or folded).
  std::vector<bool> mutated_values() const;
  // Values whose storage is written in place, themselves or through a view
  // of it: a pass whose kernel reads a value later than the op it replaces
  // did must leave these alone.
  std::vector<bool> written_through_views() const;
  // Use counts per value over live nodes and the graph outputs.
  std::vector<int> use_counts() const;
  // The live nodes reading each value, in order (graph outputs not counted).
  std::vector<std::vector<int>> readers() const;
  // The live node that reads value `id` when it is its one use (uses: use_counts()), else -1.
  int sole_reader(int id, const std::vector<int>& uses) const;
  // Drops removed nodes, puts `prologue` first and after[i] right after node
  // i, and renumbers the producers of all values.
  void splice(std::vector<Node> prologue = {}, std::vector<std::vector<Node>> after = {});
  size_t live_nodes() const;

  std::string text() const;  // one line per node: %3 = conv2d(%0, %w) {stride=[1, 1]} : float32[64, 32, 28, 28]
  std::string dot() const;   // Graphviz
};

// The value ids a node writes in place (OpDef::writes; batch_norm's running
// statistics in training mode).
std::vector<int> written_inputs(const Node& n);

// Whether value id is a constant (false for -1, an omitted input).
bool is_constant(const Graph& g, int id);
// A one-element constant's value, whatever its dtype and device; NaN for
// any other value.
double constant_scalar(const Graph& g, int id);

// Adds a constant value holding t; returns its id.
int add_constant(Graph& g, const Tensor& t, std::string name = "");

// Replaces every use of value `from` (nodes and graph outputs) by `to`.
void replace_uses(Graph& g, int from, int to);

}  // namespace kiln::graph

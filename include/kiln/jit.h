#pragma once
// Graph mode: trace a function or a Cell once, optimize the graph as a whole,
// and run it without per-op dispatch, autograd bookkeeping or allocation.
//
//   auto fn = kiln::jit::compile(net, {example_batch});
//   Tensor logits = fn({batch})[0];
//
// A graph is specialised on the shapes and dtypes of its inputs; a call with
// new ones compiles again (with a log line, or an error under
// RecompilePolicy::Error), except on the axes CompileOptions::dynamic
// declares, which may also be padded to a few bucket sizes. Set
// KILN_DUMP_GRAPH=DIR to write the graph before and after every pass, as
// text and Graphviz.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {
enum class Mode { Eager, Graph };
struct Context {
  Mode mode = Mode::Eager;
};
// The process-wide execution mode: in Graph mode, train::Model compiles its
// training step and its inference (Model::set_mode overrides it per Model).
// Safe to set and read from any thread; context() returns this thread's copy
// as of the call.
void set_context(const Context& context);
const Context& context();

namespace jit {

enum class RecompilePolicy {
  Log,    // compile for the new shapes and print a line saying why (the default)
  Silent, // compile without a word
  Error,  // throw instead of compiling again
};

// An input axis whose size varies from call to call (a batch, a sequence
// length). A new size there compiles a graph for it as expected: no log
// line, and allowed under RecompilePolicy::Error, which then refuses other
// changes only. With `buckets` (ascending sizes), a call pads the axis with
// `pad_value` up to the smallest bucket that holds it, so the function
// compiles at most once per bucket, and cuts its outputs back: the output
// axes in `outputs` ({output, axis}), or, when that is empty, axis `axis` of
// every output whose size there is the bucket's. Padding suits positions
// that cannot reach the real ones: the rows of a batch in inference, or
// sequence positions a mask hides. A size past the last bucket is refused.
struct DynamicAxis {
  int input = 0;
  int axis = 0;
  std::vector<int64_t> buckets = {};
  double pad_value = 0;
  std::vector<std::pair<int, int>> outputs = {};
};

struct CompileOptions {
  RecompilePolicy recompile = RecompilePolicy::Log;
  std::vector<DynamicAxis> dynamic;
  // Graphs kept per compiled function (one per input shape, sharing one
  // arena): the least recently used is dropped when there would be more, or
  // when the constants the passes derived for them (weights reordered,
  // packed or folded; shared between shapes where they agree) would hold
  // more bytes than max_cached_constant_bytes.
  size_t max_cached_graphs = 8;
  int64_t max_cached_constant_bytes = int64_t{1} << 30;
  bool optimize = true;          // run the passes (off: the traced graph as is)
  // Inference only: fold batch norm into convolutions and fold parameters as
  // constants. The graph is rebuilt when a parameter is later changed in place.
  bool inference = false;
  // Inference: choose convolution layouts and algorithms by timing them on
  // this machine. Off: fixed rules (blocked layouts, oneDNN's kernels), so
  // every compile gives the same graph, whatever the machine's load.
  bool timed_choices = true;
  // Run on this device (a backend in host memory): the function is traced on
  // the inputs as given, then the graph's values, parameters and constants
  // move there; calls may pass inputs on either device, and the outputs are
  // on this one. Unset: the inputs' device.
  std::optional<Device> device;
  std::string name = "function";  // in logs, errors and dump file names
  std::string dump_dir;           // KILN_DUMP_GRAPH overrides when set
};

// What compiling one shape did: the time of each stage and what every pass changed.
struct PassReport {
  std::string pass;
  std::string summary;  // "removed 12 nodes", "fused 3 chains (9 ops)", ...
  size_t nodes_after = 0;
  double ms = 0;
};
struct CompileReport {
  std::string signature;  // input shapes and dtypes
  int compile = 0;        // which compile of the function built it (1 for the first)
  // Why it was compiled again: the axis whose size changed ("input 0's axis
  // 1 went from 37 to 38"), new weights, or "" for the first compile.
  std::string cause;
  size_t traced_nodes = 0, final_nodes = 0, kernels = 0;
  int64_t arena_bytes = 0;     // all intermediates, after buffer reuse
  int64_t unshared_bytes = 0;  // the same without reuse
  // The arena the function's graphs share (one per input shape, run one at
  // a time): the largest of their arena_bytes, not their sum.
  int64_t shared_arena_bytes = 0;
  double trace_ms = 0, passes_ms = 0, prepare_ms = 0, total_ms = 0;
  std::vector<PassReport> passes;
  // On a device: the nodes that run on the CPU instead (its backend has no
  // kernel for them, or its kernel does not take the call), "name (why)".
  std::vector<std::string> on_cpu;
  // Dynamic axes (CompileOptions::dynamic without buckets): whether this
  // graph was made from an earlier compile for new sizes of them, with no
  // tracing or passes ("instantiated"); and, for a compile, whether it
  // serves every size of them ("symbolic: ...") or why not.
  bool instantiated = false;
  std::string symbolic;
  // On a device: whether its runs replay one recording of the device's work
  // (a CUDA graph, recorded at the third run, with the device memory kept
  // for recordings, which the device's allocator statistics count too), or what keeps them from it
  // ("runs unrecorded: node 'conv2d_1' runs on the CPU"); "" on the CPU,
  // and before the third run of a graph that can be.
  std::string recording;
  std::string str() const;
};

using Function = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

class CompiledFunction {
 public:
  struct Impl;  // opaque
  CompiledFunction() = default;
  explicit CompiledFunction(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  bool defined() const { return impl_ != nullptr; }
  // Runs the graph for these inputs (compiling it first for new shapes).
  // The results are new tensors owned by the caller.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);
  // The same, but the results live in the graph's arena and stay valid only
  // until the next call: no copy, for callers that consume them at once.
  const std::vector<Tensor>& run_borrowed(const std::vector<Tensor>& inputs);
  // Running with no copy of the inputs either, for callers that assemble them
  // (a server's batcher): input_slots() compiles for these shapes and dtypes
  // when needed (tracing on zeros) and returns the buffers the graph reads its
  // inputs from; the caller writes them and calls run_slots(), whose results
  // are borrowed as with run_borrowed. Not for functions whose graph depends
  // on their inputs' values; the shapes are taken as given (no bucket padding).
  const std::vector<Tensor>& input_slots(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes);
  const std::vector<Tensor>& run_slots();

  const CompileReport& report() const;  // of the graph used last
  std::string graph_text() const;       // the optimized graph used last
  std::string graph_dot() const;
  int compiles() const;                 // graphs built so far (the first plus recompiles)

 private:
  std::shared_ptr<Impl> impl_;
};

// Traces `fn` on the example inputs and compiles it now (errors surface here).
// Parameters and buffers reached by `fn` are read live on every run; other
// tensors it captures are constants.
CompiledFunction compile(Function fn, const std::vector<Tensor>& example_inputs, CompileOptions options = {});

// True while this thread traces a function and `t` holds a value that changes
// from run to run (computed from an input, a parameter or a random op):
// reading it would throw. Code that can run either way asks first.
bool varies_between_runs(const Tensor& t);
}  // namespace jit
}  // namespace kiln

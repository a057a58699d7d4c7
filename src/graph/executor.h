#pragma once
// Runs an optimized Graph. Everything is decided when it is prepared: every
// buffer's place in one arena, the kernel of every node, the tensors each
// kernel reads and writes, and the results of view ops (fixed, since the
// buffers they alias do not move). Running copies the inputs into their slots
// and calls the kernels in order; it allocates nothing. A caller that builds
// its inputs itself (a server's batcher) writes them into input_slots() and
// calls run_slots(), and nothing is copied. On a device that records work
// (CUDA graphs), the third run records the steps' launches and later runs
// replay them, unless a step prevents it (recording() says which).
#include <memory>
#include <vector>

#include "graph/ir.h"
#include "graph/memory_plan.h"
#include "kiln/backend.h"
#include "ops/dispatch_internal.h"

namespace kiln::graph {

class Executable;

// One arena for graphs that never run at the same time (those of one
// compiled function, one per input shape): sized for the largest of them,
// so keeping a graph per shape costs no more arena than the largest shape's.
// When a new graph needs more, the arena grows and every graph on it moves.
class SharedArena {
 public:
  explicit SharedArena(Device device) : device_(device) {}
  size_t bytes() const { return storage_ ? storage_->nbytes : 0; }

 private:
  friend class Executable;
  Device device_;
  Storage storage_;
  std::vector<Executable*> users_;
};

class Executable {
 public:
  // Runs on `device`: the arena is its backend's memory and the kernels its
  // kernels; where it has none, the CPU's run (in place on host memory, on
  // copies otherwise), warned about and counted as fallbacks, or refused
  // under strict_device. With `shared`, the arena is that one.
  Executable(Graph g, Device device, std::shared_ptr<SharedArena> shared = nullptr);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;
  // The outputs alias the arena: valid until the next run.
  const std::vector<Tensor>& run(const std::vector<Tensor>& inputs);
  // The buffers the graph reads its inputs from, and a run on what they hold.
  const std::vector<Tensor>& input_slots() {
    follow_arena();
    return input_slots_;
  }
  const std::vector<Tensor>& run_slots();
  const Graph& graph() const { return graph_; }
  const MemoryPlan& plan() const { return plan_; }
  size_t kernels() const { return steps_.size(); }
  // The nodes whose kernel is the CPU's, each as "name (why)".
  const std::vector<std::string>& on_cpu() const { return on_cpu_; }
  // On a device: whether runs replay one recording of the device's work (a
  // CUDA graph), made at the third run, or why not; "" on the CPU, and
  // before the third run of a graph that can be recorded.
  const std::string& recording() const { return recording_status_; }

 private:
  struct Step {
    const Node* node;
    KernelFn kernel = nullptr;
    bool fallback = false;  // the CPU's kernel, for want of one on the device
    bool on_cpu = false;    // ... placed on the CPU with its data (place_nodes): it runs in place
    Widening widened = Widening::None;  // a kernel that takes the call widened (run_widened)
    std::vector<Tensor> in, out;
  };
  KernelFn kernel_of(const Node& n, const std::vector<Tensor>& in, bool* fallback, Widening* widened = nullptr);
  // Points the values the plan puts in the arena at `arena`, with the views
  // of them, the steps' operands, the input slots and the outputs.
  void bind(const Storage& arena);
  // The shared arena moved to a larger storage: let go of the old one now
  // (a graph that is not called again holds nothing), and bind to the new
  // one when next called (follow_arena).
  void release_arena();
  void follow_arena() {
    if (stale_) bind(shared_->storage_);
  }
  bool stale_ = false;
  // Why runs cannot be recorded ("" when they can): a step whose work is
  // not all queued on the device, or that must differ from run to run.
  std::string recording_blocker() const;
  // Every step operand's address: a recording replays the ones it was made with.
  std::vector<const void*> operand_addresses() const;
  void run_steps_plainly(Backend& b, bool profiling);
  // Step i; host_memory: the device's memory is the host's (a fallback runs in place).
  void run_step(size_t i, bool profiling, bool host_memory);
  // Writes {seed, base} into draw_state_, which recorded random steps read
  // at each run (take_random), base the first of the run's counters.
  void write_draw_state(uint64_t base);
  std::unique_ptr<Backend::Recording> recording_;
  Tensor draw_state_;               // int64 [2] on the device, once a recording draws random numbers
  uint64_t recorded_counters_ = 0;  // the counters a recorded run's random steps take
  std::vector<const void*> recorded_addresses_;
  int plain_runs_ = 0;
  int recordings_ = 0;
  std::string blocker_;
  std::string recording_status_;
  Graph graph_;
  Device device_;
  MemoryPlan plan_;
  std::shared_ptr<SharedArena> shared_;
  Storage arena_;
  Storage cpu_arena_;  // the values of nodes placed on the CPU
  std::vector<Tensor> tensors_;  // per value
  std::vector<Step> steps_;
  std::vector<Tensor> input_slots_;
  std::vector<Tensor> outputs_;
  std::vector<std::string> on_cpu_;
};

}  // namespace kiln::graph

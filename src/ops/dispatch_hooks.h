#pragma once
// How the layers above the dispatcher take part in every op without it
// calling up: autograd installs the recorder of its tape once, at load; the
// graph tracer installs an op observer on its thread while it traces.
#include <vector>

#include "kiln/registry.h"

namespace kiln::detail {

// Called after an op ran with grad mode on, for ops that have a gradient rule;
// decides which inputs need one and records the node.
using GradRecorder = void (*)(const OpDef& op, const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                              const Attrs& attrs);
void set_grad_recorder(GradRecorder recorder);

// Called after each op this thread runs outside any kernel.
using OpObserver = void (*)(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                            const Attrs& attrs);
extern thread_local OpObserver t_op_observer;

// True while a program is being traced on this thread (kernels that time
// their choices leave that to the compiled graph).
inline bool tracing_this_thread() { return t_op_observer != nullptr; }

// The device a graph being traced on this thread will run on, where it is
// traced on the CPU and placed there afterwards (jit's CompileOptions::device):
// an op that decomposes (OpDef::decompose) and has no kernel there is traced
// as its decomposition, so that the graph's nodes are ops that device runs.
// The CPU while nothing is traced so.
extern thread_local DeviceType t_trace_target;

}  // namespace kiln::detail

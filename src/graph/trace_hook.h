#pragma once
// The link between eager execution and tracing. The dispatcher reports every
// op it runs to the tracer of its thread (if one is active), and tensor reads
// ask it whether the value being read is a traced one.
#include <vector>

#include "kiln/registry.h"

namespace kiln::graph::detail {

class Tracer;
// The tracer of this thread, or null. Ops run from inside a kernel (depth > 0)
// are part of that kernel, not of the traced program.
extern thread_local Tracer* t_tracer;
extern thread_local int t_kernel_depth;

void trace_call(const OpDef& op, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                const Attrs& attrs);
// Throws when `t` holds a value that varies from run to run of the traced program.
void check_read(const Tensor& t, const char* what);

inline bool tracing() { return t_tracer != nullptr && t_kernel_depth == 0; }

struct KernelDepth {
  KernelDepth() { ++t_kernel_depth; }
  ~KernelDepth() { --t_kernel_depth; }
};

}  // namespace kiln::graph::detail

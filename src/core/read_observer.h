#pragma once
// How graph mode watches reads of tensor data without core calling up: the
// tracer installs an observer on its thread while it traces, and core calls
// it from item(), to_vector(), data() and printing. Reads made inside a kernel
// (kernel depth > 0) belong to that kernel and are not observed.
#include "kiln/tensor.h"

namespace kiln::detail {

using ReadObserver = void (*)(const Tensor& t, const char* what);
extern thread_local ReadObserver t_read_observer;
extern thread_local int t_kernel_depth;

inline void observe_read(const Tensor& t, const char* what) {
  if (t_read_observer != nullptr && t_kernel_depth == 0) t_read_observer(t, what);
}
inline bool in_kernel() { return t_kernel_depth > 0; }

// Whether t's values vary from run to run of the program being traced on
// this thread (false when nothing is traced): code that may read values to
// choose a faster path asks first, and reads only fixed ones.
using VaryingQuery = bool (*)(const Tensor& t);
extern thread_local VaryingQuery t_varying_query;
inline bool values_vary(const Tensor& t) { return t_varying_query != nullptr && t_varying_query(t); }

// The running kernel's device, and whether the profiler times it
// (kernel_context() in kiln/backend.h reads them).
extern thread_local Device t_kernel_device;
extern thread_local bool t_kernel_timed;

// Marks the running of a kernel on this thread, on `device`.
class KernelScope {
 public:
  explicit KernelScope(Device device, bool timed = false) : device_(t_kernel_device), timed_(t_kernel_timed) {
    ++t_kernel_depth;
    t_kernel_device = device;
    t_kernel_timed = timed;
  }
  ~KernelScope() {
    --t_kernel_depth;
    t_kernel_device = device_;
    t_kernel_timed = timed_;
  }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;

 private:
  Device device_;  // the enclosing kernel's, restored after
  bool timed_;
};

}  // namespace kiln::detail

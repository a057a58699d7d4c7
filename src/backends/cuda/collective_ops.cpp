// The collective ops on CUDA tensors: the CPU's kernels, which hand the
// buffer to the op's process group (NCCL's takes its GPU's tensors and
// queues the collective behind the kernel's stream).
#include "backends/cuda/training_kernels.h"
#include "ops/collective_kernels.h"

namespace kiln::cuda {

void register_collective_kernels(BackendRegistration& reg) {
  reg.kernel("all_reduce_start", {KILN_COLLECTIVE_DTYPES}, detail::all_reduce_start_kernel);
  reg.kernel("all_reduce_wait", {KILN_COLLECTIVE_DTYPES}, detail::all_reduce_wait_kernel);
  reg.kernel("all_reduce", {KILN_COLLECTIVE_DTYPES}, detail::all_reduce_kernel);
}

}  // namespace kiln::cuda

#pragma once
// The collective ops' kernels hand their buffer to the process group, which
// moves the tensors of the devices it takes (Gloo: the CPU's; NCCL: its
// GPU's): the CPU registers them, and a device backend whose tensors a group
// may take registers the same functions (the CUDA backend does).
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln::detail {

void all_reduce_start_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs);
void all_reduce_wait_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs);
void all_reduce_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs);

}  // namespace kiln::detail

#define KILN_COLLECTIVE_DTYPES \
  DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::UInt8, DType::Int8

#pragma once
// Where a tensor's elements are, for the code that may touch them: kernels
// of the tensor's own backend and copies between devices. Host code reads
// through Tensor::raw_data(), which refuses memory the host cannot read.
#include "kiln/tensor.h"

namespace kiln::detail {

// The address of t's first element in its device's memory (the storage
// offset applied). For a backend whose memory is not host memory this is
// the backend's own handle: only its kernels and copies may use it.
inline void* device_address(const Tensor& t) {
  return static_cast<char*>(t.impl().storage->data) + t.offset() * static_cast<int64_t>(t.element_size());
}

// Whether the host can read and write `device`'s memory directly.
bool host_readable(Device device);

// Copies made so that host code could read a device tensor (item(),
// to_vector(), printing): each is a transfer, counted here and profiled
// as a to_device call.
int64_t host_read_copies();

}  // namespace kiln::detail

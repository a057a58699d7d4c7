#pragma once
// An index a CUDA kernel finds out of range (or an integer division by zero)
// cannot throw where it is met: the kernel records the first one in its
// device's slot (host memory the device writes through), and the backend
// raises it as an error the next time the host waits for that device (a
// copy to the host, a synchronize), naming the index, where it was and the
// valid range, as the CPU's kernels do at once. Plain values and C++17.
#include <cstdint>

namespace kiln::cuda {

enum class IndexKind : int32_t { None, Embedding, Gather, IndexSelect, Scatter, OneHot, ClassTarget, DivisionByZero };

struct IndexError {
  int32_t kind = 0;  // an IndexKind; None until a kernel meets a bad index
  int64_t index = 0, position = 0, size = 0;
};

// Device `device`'s slot as its kernels address it (made on first use).
IndexError* index_error_slot(int device);
// After the host waited for `device`: where a kernel recorded a bad index,
// clears the slot and throws describing it.
void raise_index_error(int device);

}  // namespace kiln::cuda

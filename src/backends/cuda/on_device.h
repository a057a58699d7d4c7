#pragma once
// The CUDA runtime's calls checked, and the device a thread's calls go to.
#include <cuda_runtime.h>

#include "kiln/error.h"

namespace kiln::cuda {

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) KILN_FAIL("CUDA: ", what, " failed: ", cudaGetErrorString(status));
}

// Makes `index` the calling thread's device while it lives.
class OnDevice {
 public:
  explicit OnDevice(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice");
  }
  ~OnDevice() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  OnDevice(const OnDevice&) = delete;
  OnDevice& operator=(const OnDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace kiln::cuda

#pragma once
// The ops of the custom_ops package, one file each.
#include <kiln/plugin.h>

#ifdef CUSTOM_OPS_CUDA
#include "cuda_kernels.h"
#endif

void define_rms_norm(kiln::plugin::Registry& reg);
void define_swiglu(kiln::plugin::Registry& reg);

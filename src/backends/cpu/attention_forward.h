#pragma once
// The CPU attention kernel (attention_kernels.cpp) as a function, for the
// graph passes that run it in another form.
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// in: q, k, v[, mask]; out: y, weights (empty unless save_weights); float32
// or float64. heads_interleaved: q's axis -3 holds the heads, and y is written
// as [.., L, H, Dv] in memory (the heads' rows side by side per position, as
// a multi-head layer's transpose before its output projection reads them)
// rather than [.., H, L, Dv].
void attention_forward(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a,
                       bool heads_interleaved);

}  // namespace kiln::cpu

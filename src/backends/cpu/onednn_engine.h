#pragma once
// What Kiln's oneDNN primitives share: one CPU engine, Kiln buffers wrapped
// as oneDNN memory, and the attributes every primitive is built with.
#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/vec8.h"
#include "kiln/parallel.h"

namespace kiln::cpu::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

inline dnnl::memory wrap(const dnnl::memory::desc& d, const void* p) {
  return dnnl::memory(d, engine(), const_cast<void*>(p));
}

// The scratchpad is passed in by each call (user mode): with oneDNN's own
// (library) scratchpad, one primitive run from two threads at once shares it
// and corrupts memory, and inference sessions do run them concurrently.
inline dnnl::primitive_attr base_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// ReLU runs as a pass over a primitive's output rather than as oneDNN's
// post-op: its ReLU (and binary max, and clip) turn NaN into 0 where the eager
// relu lets it through, and graph and eager must agree (a poisoned batch must
// reach the loss as NaN).
// A cap above 0 also caps the output at it (ReLU6: 6), NaN passing too.
inline void relu_after_primitive(float* y, int64_t n, float cap = 0) {
  parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
    if (cap > 0) vec8::relu_capped_in_place(y + lo, hi - lo, cap);
    else vec8::relu_in_place(y + lo, hi - lo);
  });
}

}  // namespace kiln::cpu::onednn

#pragma once
// What Kiln's oneDNN primitives share: one CPU engine, Kiln buffers wrapped
// as oneDNN memory, and the attributes every primitive is built with.
#include <oneapi/dnnl/dnnl.hpp>

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

}  // namespace kiln::cpu::onednn

#pragma once
// The hidden side of a recurrent step at batch 1 (W_hh times the state) on
// W_hh packed for it: each gate's units in panels of 16, a panel holding
// its units' weights of one input k side by side ([k][16]). A product
// streams each panel in order and needs no horizontal sums; a thread's
// share is whole panels, whatever the thread count.
#include <cstdint>

namespace kiln::cpu {

constexpr int64_t kRecurrentPanel = 16;

inline int64_t recurrent_panels_of(int64_t hidden) { return (hidden + kRecurrentPanel - 1) / kRecurrentPanel; }
// Floats of one gate's panels; the whole packed W_hh is gates times this.
inline int64_t recurrent_gate_panels_size(int64_t hidden) {
  return recurrent_panels_of(hidden) * kRecurrentPanel * hidden;
}

// Panels [p0, p1) of every gate of w_hh ([gates * hidden, hidden], row-major)
// into `panels` (laid out for all of them); units past `hidden` are zeros.
void pack_recurrent_panels(const float* w_hh, int64_t gates, int64_t hidden, int64_t p0, int64_t p1, float* panels);

// out[u] = W[u, :] . x for units [p0 * 16, min(hidden, p1 * 16)) of one gate,
// whose panels start at gate_panels.
void recurrent_panels_matvec(const float* gate_panels, int64_t hidden, int64_t p0, int64_t p1, const float* x,
                             float* out);

}  // namespace kiln::cpu

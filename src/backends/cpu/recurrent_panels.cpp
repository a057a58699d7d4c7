#include "backends/cpu/recurrent_panels.h"

#include <algorithm>
#include <cstring>

namespace kiln::cpu {
namespace {

using v16 = float __attribute__((vector_size(64)));

// (Through a reference: a 64-byte vector returned by value changes the
// calling convention between AVX2 and AVX-512 builds.)
inline void load16(v16& v, const float* p) { std::memcpy(&v, p, sizeof v); }

// NP panels (16 * NP units) at once, each panel its own stream; two sums
// per panel, k even and odd, to cover the FMA latency.
template <int NP>
void panels_product(const float* first, int64_t len, const float* x, float* sums) {
  v16 even[NP] = {}, odd[NP] = {};
  const int64_t stride = len * kRecurrentPanel;
  int64_t k = 0;
  for (; k + 2 <= len; k += 2) {
    const v16 x0 = v16{} + x[k], x1 = v16{} + x[k + 1];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      v16 w0, w1;
      load16(w0, first + j * stride + k * kRecurrentPanel);
      load16(w1, first + j * stride + (k + 1) * kRecurrentPanel);
      even[j] += w0 * x0;
      odd[j] += w1 * x1;
    }
  }
  if (k < len) {
    const v16 x0 = v16{} + x[k];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      v16 w0;
      load16(w0, first + j * stride + k * kRecurrentPanel);
      even[j] += w0 * x0;
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NP; ++j) {
    const v16 total = even[j] + odd[j];
    std::memcpy(sums + kRecurrentPanel * j, &total, sizeof total);
  }
}

}  // namespace

void pack_recurrent_panels(const float* w_hh, int64_t gates, int64_t hidden, int64_t p0, int64_t p1, float* panels) {
  // One panel (16 KB at 256 units) stays in L1 while its rows are spread
  // into it: rows read in order, the writes 64 bytes apart.
  for (int64_t q = 0; q < gates; ++q)
    for (int64_t p = p0; p < p1; ++p) {
      float* panel = panels + q * recurrent_gate_panels_size(hidden) + p * kRecurrentPanel * hidden;
      for (int64_t i = 0; i < kRecurrentPanel; ++i) {
        const int64_t unit = p * kRecurrentPanel + i;
        const float* row = w_hh + (q * hidden + unit) * hidden;
        for (int64_t k = 0; k < hidden; ++k) panel[k * kRecurrentPanel + i] = unit < hidden ? row[k] : 0.0f;
      }
    }
}

void recurrent_panels_matvec(const float* gate_panels, int64_t hidden, int64_t p0, int64_t p1, const float* x,
                             float* out) {
  constexpr int64_t kAtOnce = 4;  // four streams: 64 units, eight sums in flight
  alignas(64) float sums[kAtOnce * kRecurrentPanel];
  for (int64_t p = p0; p < p1; p += kAtOnce) {
    const float* first = gate_panels + p * kRecurrentPanel * hidden;
    const int64_t count = std::min(kAtOnce, p1 - p);
    switch (count) {
      case 4:
        panels_product<4>(first, hidden, x, sums);
        break;
      case 3:
        panels_product<3>(first, hidden, x, sums);
        break;
      case 2:
        panels_product<2>(first, hidden, x, sums);
        break;
      default:
        panels_product<1>(first, hidden, x, sums);
        break;
    }
    const int64_t u0 = p * kRecurrentPanel, u1 = std::min(hidden, (p + count) * kRecurrentPanel);
    std::memcpy(out + u0, sums, static_cast<size_t>(u1 - u0) * sizeof(float));
  }
}

}  // namespace kiln::cpu

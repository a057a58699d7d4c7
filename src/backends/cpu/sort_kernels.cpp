// CPU topk: per line along the axis, a partial sort of the positions by
// value (ties by position), then the first k gathered.
#include <algorithm>
#include <numeric>

#include "backends/cpu/kernel_helpers.h"
#include "kiln/parallel.h"

namespace kiln::cpu {
namespace {

template <typename T>
void topk_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[0]);
  const Shape& s = x.shape();
  const int64_t axis = normalize_axis(a.get_int("axis", -1), x.dim());
  const int64_t k = a.get_int("k");
  const bool largest = a.get_bool("largest", true);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= s[d];
  const int64_t len = s[axis];
  const T* src = x.data<T>();
  T* values = out[0].data<T>();
  int64_t* indices = out[1].data<int64_t>();
  parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(len, 1)), [&](int64_t b, int64_t e) {
    std::vector<int64_t> order(len);
    for (int64_t line = b; line < e; ++line) {
      const int64_t o = line / inner, i = line % inner;
      const T* p = src + o * len * inner + i;
      std::iota(order.begin(), order.end(), 0);
      auto before = [&](int64_t u, int64_t v) {
        const T pu = p[u * inner], pv = p[v * inner];
        if (pu != pv) return largest ? pu > pv : pu < pv;
        return u < v;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = o * k * inner + j * inner + i;
        values[at] = p[order[j] * inner];
        indices[at] = order[j];
      }
    }
  });
}

}  // namespace

KILN_CPU_NUMERIC("topk", topk_kernel);

}  // namespace kiln::cpu

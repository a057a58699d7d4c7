// Inference: where(c1, a, where(c2, b, z)) as one pass over the result, the
// inner selection never written. A decoder's cache update is such a pair
// per key and value cache (its past rows, then its new rows, then zeros):
// two writes and a read of the whole cache a token, where one write does.
#include <algorithm>
#include <cstring>

#include "backends/cpu/loops.h"
#include "backends/cpu/passes/cpu_passes.h"

namespace kiln::graph {
namespace {

// Operands: out, c1, a, c2, b, z (inner_first: where(c1, where(c2, b, z), a)).
template <typename T>
void nested_where(const std::vector<Tensor>& in, Tensor& o, bool inner_first) {
  auto plan = cpu::make_plan<6>(o.shape(), {&o, &in[0], &in[1], &in[2], &in[3], &in[4]});
  std::array<char*, 6> base{static_cast<char*>(o.raw_data())};
  for (int k = 0; k < 5; ++k) base[k + 1] = static_cast<char*>(in[k].raw_data());
  cpu::run_plan<6>(plan, base, {sizeof(T), 1, sizeof(T), 1, sizeof(T), sizeof(T)},
                   [inner_first](const std::array<char*, 6>& p, const std::array<int64_t, 6>& s, int64_t n) {
                     T* y = reinterpret_cast<T*>(p[0]);
                     const bool* c1 = reinterpret_cast<const bool*>(p[1]);
                     const bool* c2 = reinterpret_cast<const bool*>(p[3]);
                     // Operand k's element i, k = 2 (a), 4 (b) or 5 (z).
                     auto at = [&](int k, int64_t i) { return reinterpret_cast<const T*>(p[k])[i * s[k]]; };
                     auto chosen = [&](bool first, bool second) { return first != inner_first ? 2 : (second ? 4 : 5); };
                     if (s[1] == 0 && s[3] == 0) {  // both conditions fixed for the run (masks over rows)
                       const int k = chosen(*c1, *c2);
                       const T* from = reinterpret_cast<const T*>(p[k]);
                       if (s[0] == 1 && s[k] == 1)
                         std::memcpy(y, from, static_cast<size_t>(n) * sizeof(T));
                       else if (s[0] == 1 && s[k] == 0)
                         std::fill(y, y + n, *from);
                       else
                         for (int64_t i = 0; i < n; ++i) y[i * s[0]] = from[i * s[k]];
                       return;
                     }
                     for (int64_t i = 0; i < n; ++i) y[i * s[0]] = at(chosen(c1[i * s[1]], c2[i * s[3]]), i);
                   });
}

CustomKernel nested_where_kernel(size_t element, bool inner_first) {
  return [=](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    switch (element) {  // a selection moves bits: by element size
      case 1:
        return nested_where<uint8_t>(in, out[0], inner_first);
      case 2:
        return nested_where<uint16_t>(in, out[0], inner_first);
      case 4:
        return nested_where<uint32_t>(in, out[0], inner_first);
      default:
        return nested_where<uint64_t>(in, out[0], inner_first);
    }
  };
}

}  // namespace

std::string fuse_nested_wheres(Graph& g) {
  const std::vector<int> uses = g.use_counts();
  const std::vector<bool> written = g.written_through_views();  // (read later than the inner selection read them)
  int fused = 0;
  for (Node& outer : g.nodes) {
    if (!outer.is_op("where") || outer.inputs.size() != 3 || outer.outputs.size() != 1) continue;
    const DType dtype = g.values[outer.outputs[0]].meta.dtype;
    const size_t element = dtype_size(dtype);
    if (element != 1 && element != 2 && element != 4 && element != 8) continue;
    for (int side : {2, 1}) {  // the inner selection as the else operand, or as the then operand
      const int inner_id = outer.inputs[side];
      const Value& v = g.values[inner_id];
      if (inner_id < 0 || v.kind != ValueKind::Result || uses[inner_id] != 1) continue;
      Node& inner = g.nodes[v.producer];
      if (!inner.is_op("where") || inner.inputs.size() != 3 || v.meta.dtype != dtype ||
          std::any_of(inner.inputs.begin(), inner.inputs.end(), [&](int id) { return id < 0 || written[id]; }))
        continue;
      const int other = outer.inputs[3 - side];
      outer.inputs = {outer.inputs[0], other, inner.inputs[0], inner.inputs[1], inner.inputs[2]};
      inner.removed = true;
      outer.custom = nested_where_kernel(element, side == 1);
      outer.op = nullptr;
      outer.attrs = {};
      outer.any_shape = true;  // sizes from the tensors
      outer.label = "where(where)";
      ++fused;
      break;
    }
  }
  return fused ? std::to_string(fused) + " nested selections as one pass each" : "";
}

}  // namespace kiln::graph

#include "graph/symbolic_shapes.h"

#include <cstring>

namespace kiln::graph {

int64_t AffineDim::at(const std::vector<int64_t>& sizes) const {
  int64_t v = c;
  for (size_t i = 0; i < k.size(); ++i) v += k[i] * sizes[i];
  return v;
}

bool AffineDim::fixed() const {
  for (int64_t x : k)
    if (x != 0) return false;
  return true;
}

namespace {

// Fits c + sum k_i s_i to the base and probe values (symbol i moved by
// `step`), and checks it against the check graph's value (every symbol
// moved by 2 step).
bool fit(int64_t at_base, const std::vector<int64_t>& at_probe, int64_t at_check, const std::vector<int64_t>& base,
         int64_t step, AffineDim* out) {
  AffineDim d;
  d.c = at_base;
  int64_t moved = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    if ((at_probe[i] - at_base) % step != 0) return false;
    d.k.push_back((at_probe[i] - at_base) / step);
    d.c -= d.k.back() * base[i];
    moved += 2 * step * d.k.back();
  }
  if (at_base + moved != at_check) return false;
  *out = std::move(d);
  return true;
}

// Whether two captured tensors hold the same values (the same storage, or
// equal bytes: a constant folded alike at both sizes).
bool same_constant(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.impl().storage.get() == b.impl().storage.get() && a.shape() == b.shape() && a.strides() == b.strides())
    return true;
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || !(a.device() == b.device()) ||
      a.device().type != DeviceType::CPU)
    return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.numel()) * x.element_size()) == 0;
}

std::string node_ref(const Graph& g, int at) { return "node " + std::to_string(at) + " (" + g.nodes[at].name() + ")"; }

}  // namespace

std::optional<SymbolicShapes> generalize(const Graph& base, const std::vector<int64_t>& base_sizes, int64_t step,
                                         const std::vector<const Graph*>& probes, const Graph& check, std::string* why) {
  auto fail = [&](std::string reason) -> std::optional<SymbolicShapes> {
    *why = std::move(reason);
    return std::nullopt;
  };
  std::vector<const Graph*> all = probes;
  all.push_back(&check);
  for (const Graph* p : all)
    if (p->values.size() != base.values.size() || p->nodes.size() != base.nodes.size() || p->inputs != base.inputs ||
        p->outputs != base.outputs)
      return fail("its graph has other nodes at other sizes (a loop or a branch that depends on a size)");
  SymbolicShapes s;
  s.base = base_sizes;
  auto fit_all = [&](auto value_of, AffineDim* out) {
    std::vector<int64_t> at_probe;
    for (const Graph* p : probes) at_probe.push_back(value_of(*p));
    return fit(value_of(base), at_probe, value_of(check), base_sizes, step, out);
  };
  s.dims.resize(base.values.size());
  for (size_t v = 0; v < base.values.size(); ++v) {
    const Value& b = base.values[v];
    for (const Graph* p : all) {
      const Value& o = p->values[v];
      if (o.kind != b.kind || o.meta.dtype != b.meta.dtype || o.meta.shape.size() != b.meta.shape.size() ||
          o.layout != b.layout || o.producer != b.producer || o.output_index != b.output_index ||
          o.meta.defined != b.meta.defined)
        return fail("value %" + std::to_string(v) + " differs between sizes beyond its shape");
      if ((b.kind == ValueKind::Constant || b.kind == ValueKind::Param) && !same_constant(b.tensor, o.tensor))
        return fail("constant %" + std::to_string(v) + (b.name.empty() ? "" : " (" + b.name + ")") +
                    " is computed from the sizes (shapes folded into values)");
    }
    for (size_t d = 0; d < b.meta.shape.size(); ++d) {
      AffineDim dim;
      if (!fit_all([&](const Graph& g) { return g.values[v].meta.shape[d]; }, &dim))
        return fail("value %" + std::to_string(v) + "'s axis " + std::to_string(d) + " does not follow the sizes linearly");
      s.dims[v].push_back(std::move(dim));
    }
  }
  for (size_t n = 0; n < base.nodes.size(); ++n) {
    const Node& b = base.nodes[n];
    const int at = static_cast<int>(n);
    for (const Graph* p : all) {
      const Node& o = p->nodes[n];
      if (o.op != b.op || o.removed != b.removed || o.inputs != b.inputs || o.outputs != b.outputs ||
          o.label != b.label || o.fused_from != b.fused_from || o.inplace_input != b.inplace_input ||
          static_cast<bool>(o.custom) != static_cast<bool>(b.custom) || o.attrs.items().size() != b.attrs.items().size())
        return fail(node_ref(base, at) + " differs between sizes");
    }
    if (b.removed) continue;
    if (b.custom && !b.any_shape) return fail(node_ref(base, at) + "'s kernel is built for one shape");
    const auto& items = b.attrs.items();
    for (size_t a = 0; a < items.size(); ++a) {
      const auto& [name, value] = items[a];
      for (const Graph* p : all) {
        const auto& other = p->nodes[n].attrs.items()[a];
        if (other.first != name || other.second.index() != value.index())
          return fail(node_ref(base, at) + "'s attributes differ between sizes");
        const bool numbers = std::holds_alternative<int64_t>(value) || std::holds_alternative<std::vector<int64_t>>(value);
        if (!numbers && other.second != value)
          return fail(node_ref(base, at) + "'s attribute '" + name + "' changes with the sizes");
        if (auto* v = std::get_if<std::vector<int64_t>>(&value);
            v && std::get<std::vector<int64_t>>(other.second).size() != v->size())
          return fail(node_ref(base, at) + "'s attribute '" + name + "' changes length with the sizes");
      }
      auto element = [&](const Graph& g, int e) {
        const AttrValue& x = g.nodes[n].attrs.items()[a].second;
        return e < 0 ? std::get<int64_t>(x) : std::get<std::vector<int64_t>>(x)[static_cast<size_t>(e)];
      };
      int count = -1;
      if (auto* v = std::get_if<std::vector<int64_t>>(&value)) count = static_cast<int>(v->size());
      else if (!std::holds_alternative<int64_t>(value)) continue;
      for (int e = count < 0 ? -1 : 0; e < std::max(count, 0); ++e) {
        AffineDim dim;
        if (!fit_all([&](const Graph& g) { return element(g, e); }, &dim))
          return fail(node_ref(base, at) + "'s attribute '" + name + "' does not follow the sizes linearly");
        if (!dim.fixed()) s.attrs.push_back({at, name, e, std::move(dim)});
        if (count < 0) break;
      }
    }
  }
  return s;
}

std::optional<Graph> instantiate(const Graph& base, const SymbolicShapes& s, const std::vector<int64_t>& sizes,
                                 std::string* why) {
  Graph g = base;
  for (size_t v = 0; v < g.values.size(); ++v)
    for (size_t d = 0; d < s.dims[v].size(); ++d) {
      const int64_t size = s.dims[v][d].at(sizes);
      if (size < 0) {
        *why = "value %" + std::to_string(v) + "'s axis " + std::to_string(d) + " would be " + std::to_string(size);
        return std::nullopt;
      }
      g.values[v].meta.shape[d] = size;
    }
  for (const auto& a : s.attrs) {
    Attrs& attrs = g.nodes[static_cast<size_t>(a.node)].attrs;
    if (a.element < 0) {
      attrs.set(a.name, a.value.at(sizes));
    } else {
      std::vector<int64_t> v = attrs.get_ints(a.name);
      v[static_cast<size_t>(a.element)] = a.value.at(sizes);
      attrs.set(a.name, v);
    }
  }
  // The registry ops' own inference must agree: a size past what the probes
  // told (a dimension that is not affine after all) shows here.
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (node.removed) continue;
    std::vector<TensorMeta> in;
    for (int id : node.inputs) in.push_back(id >= 0 ? g.values[id].meta : TensorMeta{false, {}, DType::Float32, {}});
    if (node.runs_at) {
      std::vector<TensorMeta> out;
      for (int id : node.outputs) out.push_back(g.values[id].meta);
      if (!node.runs_at(in, out)) {
        *why = node_ref(g, static_cast<int>(n)) + "'s kernel does not run at these shapes";
        return std::nullopt;
      }
    }
    if (!node.op || !node.op->infer) continue;
    std::vector<TensorMeta> out;
    try {
      out = node.op->infer(in, node.attrs);
    } catch (const std::exception& e) {
      *why = node_ref(g, static_cast<int>(n)) + " refuses the new shapes: " + e.what();
      return std::nullopt;
    }
    for (size_t k = 0; k < node.outputs.size() && k < out.size(); ++k)
      if (out[k].shape != g.values[node.outputs[k]].meta.shape) {
        *why = node_ref(g, static_cast<int>(n)) + " infers another shape for its output " + std::to_string(k);
        return std::nullopt;
      }
  }
  return g;
}

}  // namespace kiln::graph

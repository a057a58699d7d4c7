#include "graph/placement.h"

#include <map>

#include "ops/dispatch_internal.h"

namespace kiln::graph {
namespace {

// Whether `n` stays on `device`. False when only the CPU has a kernel that
// takes it, with the reason in *why (no kernel there for its dtype, or the
// kernel's own reason for turning the call away); strict_device refuses that.
bool runs_on(const Graph& g, const Node& n, Device device, std::string* why) {
  std::vector<std::optional<DType>> dtypes;
  for (int id : n.inputs) dtypes.push_back(id >= 0 ? std::optional<DType>(g.values[id].meta.dtype) : std::nullopt);
  const int d = n.op->dispatch_input;
  const DType dtype = d >= 0 && static_cast<size_t>(d) < n.inputs.size() && n.inputs[d] >= 0
                          ? g.values[n.inputs[d]].meta.dtype
                          : g.values[n.outputs.at(0)].meta.dtype;
  if (device_kernel(*n.op, device, dtypes, dtype, n.attrs, why) != nullptr) return true;
  if (widening_kernel(*n.op, device, dtypes, dtype, n.attrs) != nullptr) return true;
  // No CPU kernel either: it stays, and the executor names what is missing.
  if (!n.op->kernels[static_cast<int>(DeviceType::CPU)][static_cast<int>(dtype)]) return true;
  // An op that writes an input in place stays: the executor copies what it writes back.
  if (!n.op->written(n.attrs, n.inputs.size()).empty()) return true;
  allow_fallback(*n.op, device, dtype, *why);
  if (why->empty()) *why = std::string("no ") + device_type_name(device.type) + " kernel for " + dtype_name(dtype);
  return false;
}

}  // namespace

std::vector<std::string> place_nodes(Graph& g, Device device) {
  static const OpDef& to_device = OpRegistry::instance().get("to_device");
  std::vector<std::string> moved;
  std::vector<Node> placed;
  // Copies already made: (value, destination is the CPU) -> the copy.
  std::map<std::pair<int, bool>, int> copies;
  const auto mutated = g.mutated_values();
  auto copy_to = [&](int id, Device to) {
    const bool to_cpu = to.type == DeviceType::CPU;
    auto it = copies.find({id, to_cpu});
    const bool written = static_cast<size_t>(id) < mutated.size() && mutated[id];
    if (it != copies.end() && !written) return it->second;
    Value v;
    v.meta = g.values[id].meta;
    v.meta.device = to;
    const int copy = g.add_value(std::move(v));
    Node t;
    t.op = &to_device;
    t.attrs = Attrs{{"device", to.str()}};
    t.inputs = {id};
    t.outputs = {copy};
    placed.push_back(std::move(t));
    copies[{id, to_cpu}] = copy;
    return copy;
  };
  for (Node& n : g.nodes) {
    if (n.removed) continue;
    Device where = device;
    if (n.is_view()) {
      if (n.inputs[0] >= 0) where = g.values[n.inputs[0]].meta.device;  // a view stays with its storage
    } else if (n.op && !n.op->has_tag(kTagTransfer)) {
      std::string why;
      if (!runs_on(g, n, device, &why)) {
        where = cpu_device();
        moved.push_back(n.name() + " (" + why + ")");
      }
    }
    if (n.op && n.op->has_tag(kTagTransfer)) {
      placed.push_back(std::move(n));
      continue;
    }
    if (!n.is_view())
      for (int& id : n.inputs)
        if (id >= 0 && g.values[id].meta.device != where) id = copy_to(id, where);
    for (int id : n.outputs) g.values[id].meta.device = where;
    placed.push_back(std::move(n));
  }
  for (int& id : g.outputs)
    if (g.values[id].meta.device != device) id = copy_to(id, device);
  g.nodes = std::move(placed);
  g.splice();
  return moved;
}

}  // namespace kiln::graph

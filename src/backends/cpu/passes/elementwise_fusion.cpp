// Elementwise fusion: a chain (or tree) of float32 elementwise ops over one
// shape becomes one kernel that streams blocks of elements through all of
// them, so the intermediate values never go to memory.
#include <algorithm>
#include <cmath>

#include "backends/cpu/passes/cpu_passes.h"
#include "graph/passes.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {

// An op joins a fused loop when its definition has a float formula
// (OpDef::math) and the fusible tag.
bool fusible(const Node& n) { return n.op && n.op->math && n.op->has_tag(kTagFusible); }

// An operand: an external input of the fused kernel (index into its inputs)
// or the result of an earlier instruction.
struct Operand {
  bool external = true;
  int index = 0;
};

struct Instr {
  BlockFn<float> fn = nullptr;
  Attrs attrs;
  Operand a, b;
  bool binary = false;
};

constexpr int64_t kBlock = 512;
constexpr size_t kMaxInstrs = 12;              // ops per fused loop
constexpr size_t kMaxInputs = 2 * kMaxInstrs;  // so their inputs fit the stack buffers

// How a kernel input maps onto the output's elements.
struct Source {
  enum Kind { Full, Scalar, Broadcast } kind = Full;
  const float* data = nullptr;
  float value = 0;
  std::vector<int64_t> strides;  // Broadcast: per output axis, 0 where the input has size 1
};

// Gathers len elements of a broadcast input, from output element `start` on.
// It walks runs along the last axis, each a fill (the input is constant along
// it), a copy (contiguous) or a strided loop, stepping a multi-index per run.
void gather(const Source& s, const Shape& shape, int64_t start, int64_t len, float* buf) {
  const size_t rank = shape.size();
  int64_t idx[16];
  int64_t off = 0, rest = start;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rest % shape[d];
    rest /= shape[d];
    off += idx[d] * s.strides[d];
  }
  const int64_t last = shape[rank - 1], step = s.strides[rank - 1];
  for (int64_t i = 0; i < len;) {
    const int64_t run = std::min(len - i, last - idx[rank - 1]);
    if (step == 0) std::fill(buf + i, buf + i + run, s.data[off]);
    else if (step == 1) std::copy(s.data + off, s.data + off + run, buf + i);
    else
      for (int64_t k = 0; k < run; ++k) buf[i + k] = s.data[off + k * step];
    i += run;
    // Advance the multi-index by `run` elements: to the next row, or within this one.
    off += run * step;
    idx[rank - 1] += run;
    for (size_t d = rank - 1; d > 0 && idx[d] == shape[d]; --d) {
      off -= s.strides[d] * shape[d];
      idx[d] = 0;
      off += s.strides[d - 1];
      ++idx[d - 1];
    }
  }
}

CustomKernel make_kernel(std::vector<Instr> program) {
  return [program](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const int64_t n = out[0].numel();
    const Shape& shape = out[0].shape();
    std::vector<Source> src(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      Source& s = src[i];
      if (in[i].numel() == 1 && n != 1) {
        s.kind = Source::Scalar;
        s.value = *in[i].data<float>();
      } else if (in[i].shape() == shape) {
        s.data = in[i].data<float>();
      } else {  // broadcast: align axes from the right, stride 0 where the input has size 1
        s.kind = Source::Broadcast;
        s.data = in[i].data<float>();
        s.strides.assign(shape.size(), 0);
        const Shape& is = in[i].shape();
        const Strides& st = in[i].strides();
        for (size_t k = 0; k < is.size(); ++k) {
          size_t d = shape.size() - is.size() + k;
          if (is[k] != 1) s.strides[d] = st[k];
        }
      }
    }
    float* y = out[0].data<float>();
    parallel_for((n + kBlock - 1) / kBlock, 4, [&](int64_t b0, int64_t b1) {
      alignas(64) float regs[kMaxInstrs][kBlock];
      alignas(64) float bufs[kMaxInputs][kBlock];
      for (size_t i = 0; i < in.size(); ++i)
        if (src[i].kind == Source::Scalar) std::fill(bufs[i], bufs[i] + kBlock, src[i].value);
      for (int64_t blk = b0; blk < b1; ++blk) {
        const int64_t start = blk * kBlock, len = std::min(kBlock, n - start);
        for (size_t i = 0; i < in.size(); ++i)
          if (src[i].kind == Source::Broadcast) gather(src[i], shape, start, len, bufs[i]);
        auto operand = [&](const Operand& o) -> const float* {
          if (!o.external) return regs[o.index];
          return src[o.index].kind == Source::Full ? src[o.index].data + start : bufs[o.index];
        };
        for (size_t k = 0; k < program.size(); ++k) {
          const Instr& ins = program[k];
          float* dst = k + 1 == program.size() ? y + start : regs[k];
          const float* args[2] = {operand(ins.a), ins.binary ? operand(ins.b) : nullptr};
          ins.fn(args, dst, len, ins.attrs);
        }
      }
    });
  };
}

}  // namespace

std::string fuse_elementwise(Graph& g) {
  auto uses = g.use_counts();
  auto mutated = g.mutated_values();
  // group[node] = index of the fused group a node's result feeds into, built in order.
  struct Group {
    std::vector<int> nodes;  // in execution order; the last produces the group's result
  };
  std::vector<int> group_of(g.nodes.size(), -1);
  std::vector<Group> groups;
  // An input fits when it is float32, contiguous, and equal or broadcastable to the shape.
  const auto full_shape = [&](int id, const Shape& shape) {
    const Value& v = g.values[id];
    if (v.meta.dtype != DType::Float32 || shape.size() > 16) return false;
    if (numel_of(v.meta.shape) == 1) return true;
    if (v.meta.shape.size() > shape.size()) return false;
    for (size_t k = 0; k < v.meta.shape.size(); ++k) {
      int64_t d = v.meta.shape[k], o = shape[shape.size() - v.meta.shape.size() + k];
      if (d != o && d != 1) return false;
    }
    if (v.kind == ValueKind::Result) return !g.nodes[v.producer].is_view();  // arena buffers are contiguous
    if (v.kind == ValueKind::Input) return true;                              // copied into a contiguous slot
    return v.tensor.is_contiguous();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.removed || n.outputs.size() != 1 || !fusible(n)) continue;
    const Shape& shape = g.values[n.outputs[0]].meta.shape;
    if (g.values[n.outputs[0]].meta.dtype != DType::Float32 || mutated[n.outputs[0]]) continue;
    bool ok = true;
    for (int id : n.inputs) ok = ok && id >= 0 && full_shape(id, shape) && !mutated[id];
    if (!ok) continue;
    // Join the groups of inputs computed by fusible nodes and used only here
    // (two such groups merge: their nodes are independent and all precede this one).
    int joined = -1;
    for (int id : n.inputs) {
      const Value& v = g.values[id];
      if (v.kind != ValueKind::Result || uses[id] != 1 || v.meta.shape != shape) continue;
      int gi = group_of[v.producer];
      if (gi < 0 || groups[gi].nodes.back() != v.producer || gi == joined) continue;
      if (joined < 0) {
        joined = gi;
        continue;
      }
      if (groups[joined].nodes.size() + groups[gi].nodes.size() >= kMaxInstrs) continue;
      auto& into = groups[joined].nodes;
      for (int m : groups[gi].nodes) {
        into.push_back(m);
        group_of[m] = joined;
      }
      std::sort(into.begin(), into.end());
      groups[gi].nodes.clear();
    }
    if (joined < 0 || groups[joined].nodes.size() >= kMaxInstrs) {
      joined = static_cast<int>(groups.size());
      groups.push_back({});
    }
    groups[joined].nodes.push_back(static_cast<int>(i));
    group_of[i] = joined;
  }
  size_t fused_groups = 0, fused_ops = 0;
  for (Group& grp : groups) {
    if (grp.nodes.size() < 2) continue;
    Node& last = g.nodes[grp.nodes.back()];
    std::vector<int> external;
    std::vector<Instr> program;
    std::vector<int> produced;  // value id produced by each instruction
    std::string label = "fused(";
    auto operand = [&](int id) {
      for (size_t k = 0; k < produced.size(); ++k)
        if (produced[k] == id) return Operand{false, static_cast<int>(k)};
      for (size_t k = 0; k < external.size(); ++k)
        if (external[k] == id) return Operand{true, static_cast<int>(k)};
      external.push_back(id);
      return Operand{true, static_cast<int>(external.size()) - 1};
    };
    for (size_t k = 0; k < grp.nodes.size(); ++k) {
      const Node& n = g.nodes[grp.nodes[k]];
      Instr ins;
      ins.fn = n.op->math.f32;
      ins.attrs = n.attrs;
      ins.a = operand(n.inputs[0]);
      ins.binary = n.op->math.arity > 1;
      if (ins.binary) ins.b = operand(n.inputs[1]);
      program.push_back(ins);
      produced.push_back(n.outputs[0]);
      label += (k ? ", " : "") + n.op->name;
    }
    label += ")";
    Node fused;
    fused.inputs = external;
    fused.outputs = last.outputs;
    fused.custom = make_kernel(std::move(program));
    fused.label = label;
    for (int idx : grp.nodes) g.nodes[idx].removed = true;
    const int at = grp.nodes.back();
    g.nodes[at] = std::move(fused);
    g.values[g.nodes[at].outputs[0]].producer = at;
    ++fused_groups;
    fused_ops += grp.nodes.size();
  }
  return fused_groups ? "fused " + std::to_string(fused_ops) + " elementwise ops into " + std::to_string(fused_groups) +
                            " loops"
                      : "";
}

}  // namespace kiln::graph

// The CPU's lowering of elementwise expressions: one loop over blocks of
// 512 elements, each step the float form of its op's formula (OpDef::math)
// on registers of one block, inputs read in place, broadcast, through their
// strides (a view's) or as scalars.
#include <algorithm>

#include "graph/elementwise_fusion.h"
#include "kiln/parallel.h"

namespace kiln::graph {
namespace {

using Operand = ElementwiseExpression::Operand;

// A step as the block loop runs it: the formula's float form.
struct Instr {
  BlockFn<float> fn = nullptr;
  Attrs attrs;
  Operand a, b;
  bool binary = false;
};

constexpr int64_t kBlock = 512;
constexpr size_t kMaxInstrs = kMaxFusedSteps;
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
  KILN_ASSERT(program.size() <= kMaxInstrs, "an elementwise expression of ", program.size(), " steps");
  return [program](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const int64_t n = out[0].numel();
    const Shape& shape = out[0].shape();
    std::vector<Source> src(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      Source& s = src[i];
      if (in[i].numel() == 1 && n != 1) {
        s.kind = Source::Scalar;
        s.value = *in[i].data<float>();
      } else if (in[i].shape() == shape && in[i].is_contiguous()) {
        s.data = in[i].data<float>();
      } else {  // broadcast or a strided view: align axes from the right, stride 0 where the input has size 1
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

CustomKernel lower(const ElementwiseExpression& expression) {
  std::vector<Instr> program;
  for (const auto& step : expression.steps) {
    Instr ins;
    ins.fn = step.op->math.f32;
    ins.attrs = step.attrs;
    ins.a = step.a;
    ins.binary = step.op->math.arity > 1;
    if (ins.binary) ins.b = step.b;
    program.push_back(std::move(ins));
  }
  return make_kernel(std::move(program));
}

[[maybe_unused]] const bool registered = [] {
  register_elementwise_lowering(DeviceType::CPU, lower);
  return true;
}();

}  // namespace
}  // namespace kiln::graph

#include "backends/cpu/onednn_linear.h"

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "backends/cpu/onednn_call.h"
#include "backends/cpu/onednn_engine.h"
#include "kiln/tensor.h"

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;
using dt = memory::data_type;

struct Descs {
  memory::desc x, w, bias, y;
};

Descs descs(const LinearCall& c) {
  Descs d;
  d.x = memory::desc({c.rows, c.in}, dt::f32, memory::format_tag::ab);
  d.w = memory::desc({c.in, c.out}, dt::f32, memory::format_tag::ba);  // Kiln's [out, in], read transposed
  d.bias = c.bias ? memory::desc({1, c.out}, dt::f32, memory::format_tag::ab) : memory::desc();
  d.y = memory::desc({c.rows, c.out}, dt::f32, memory::format_tag::ab);
  return d;
}

struct Prepared {
  dnnl::matmul prim;
  memory::desc scratchpad;
};

// ReLU is a pass after the primitive (oneDNN's makes NaN a number); GELU is
// a post-op (NaN passes). The thread count is the primitive's own.
using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool, int>;

// Null when oneDNN refuses the shape.
const Prepared* prepared(const LinearCall& c) {
  static std::mutex mu;
  static std::map<Key, Prepared> cache;
  std::lock_guard<std::mutex> lock(mu);
  Key key{c.rows, c.in, c.out, c.bias, c.residual, c.gelu, c.gelu_tanh, get_num_threads()};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.prim ? &it->second : nullptr;
  Prepared p;
  try {
    Descs d = descs(c);
    dnnl::post_ops ops;
    if (c.residual) ops.append_sum(1.0f);
    if (c.gelu) {
      const auto form = c.gelu_tanh ? dnnl::algorithm::eltwise_gelu_tanh : dnnl::algorithm::eltwise_gelu_erf;
      ops.append_eltwise(1.0f, form, 0.0f, 0.0f);
    }
    dnnl::primitive_attr attr = base_attr();
    attr.set_post_ops(ops);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.x, d.w, d.bias, d.y), attr, engine());
    p = {dnnl::matmul(pd), pd.scratchpad_desc()};
  } catch (const dnnl::error&) {
  }
  auto& stored = cache.emplace(key, p).first->second;
  return stored.prim ? &stored : nullptr;
}

}  // namespace

bool linear_forward(const LinearCall& c, const float* x, const float* w, const float* bias, float* y) {
  const Prepared* p = prepared(c);
  if (!p) return false;
  Descs d = descs(c);
  CallArgs args;
  args.buffer(DNNL_ARG_SRC, d.x, x).buffer(DNNL_ARG_WEIGHTS, d.w, w).buffer(DNNL_ARG_DST, d.y, y);
  if (c.bias) args.buffer(DNNL_ARG_BIAS, d.bias, bias);
  execute(p->prim, args.scratchpad(p->scratchpad));
  if (c.relu) relu_after_primitive(y, c.rows * c.out);
  return true;
}

}  // namespace kiln::cpu::onednn

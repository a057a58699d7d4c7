#include "backends/cpu/onednn_int8.h"

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_call.h"
#include "backends/cpu/onednn_engine.h"
#include "kiln/tensor.h"

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dt activation_type(bool is_signed) { return is_signed ? dt::s8 : dt::u8; }

// Zero points are given at run time; an input's only where it has one (with
// none, oneDNN picks faster kernels). The scales are built into a
// convolution (oneDNN 2's convolutions take no run-time ones) and given at
// run time to a matrix product.
dnnl::primitive_attr quantized_attr(int scale_mask, const std::vector<float>& scales, bool src_zero) {
  dnnl::primitive_attr attr = base_attr();
  attr.set_output_scales(scale_mask, scales.empty() ? std::vector<float>{DNNL_RUNTIME_F32_VAL} : scales);
  if (src_zero) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
  return attr;
}

struct ConvDescs {
  memory::desc src, wei, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// The right padding that makes oneDNN's output size come out exactly (see
// onednn_conv.cpp); false when oneDNN cannot express it.
bool conv_descs(const QuantizedConvCall& c, ConvDescs& d) {
  const ConvShape& s = c.shape;
  const int64_t pr_h = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h - s.ph;
  const int64_t pr_w = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pw;
  if (pr_h <= -s.sh || pr_w <= -s.sw) return false;
  d.src = memory::desc({s.n, s.c, s.h, s.w}, activation_type(c.x_signed), c.x_nhwc ? tag::nhwc : tag::nchw);
  d.dst = memory::desc({s.n, s.o, s.oh, s.ow}, activation_type(c.y_signed), c.y_nhwc ? tag::nhwc : tag::nchw);
  d.wei = s.groups == 1 ? memory::desc({s.o, s.c, s.kh, s.kw}, dt::s8, tag::oihw)
                        : memory::desc({s.groups, s.o / s.groups, s.c / s.groups, s.kh, s.kw}, dt::s8, tag::goihw);
  d.bias = c.bias ? memory::desc({s.o}, dt::s32, tag::x) : memory::desc();
  d.strides = {s.sh, s.sw};
  d.dilates = {s.dh - 1, s.dw - 1};
  d.pad_l = {s.ph, s.pw};
  d.pad_r = {pr_h, pr_w};
  return true;
}

memory::desc any(const memory::desc& plain) { return memory::desc(plain.dims(), plain.data_type(), tag::any); }

struct ConvPrimitive {
  dnnl::convolution_forward prim;
  memory::desc src, wei, dst, scratchpad;
  std::string implementation;  // oneDNN's name for it
};

ConvPrimitive primitive_of(const dnnl::convolution_forward::primitive_desc& pd) {
  return {dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(), pd.scratchpad_desc(),
          pd.impl_info_str()};
}

// A primitive splits its work for the thread count it was built under, so
// the count is part of the key; and one on prepared weights is timed
// against the alternatives (fastest) where one for a single call is not.
using ConvKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool, bool, bool, int,
                           std::vector<float>>;
ConvKey key_of(const QuantizedConvCall& c, const std::vector<float>& scales, int threads) {
  const ConvShape& s = c.shape;
  return {s.n,  s.c,  s.h,  s.w,  s.o,      s.kh,       s.kw,       s.oh,          s.ow,   s.sh,         s.sw,
          s.ph, s.pw, s.dh, s.dw, s.groups, c.x_signed, c.y_signed, c.per_channel, c.bias, c.x_zero_point,
          c.prepared_weights, threads, scales};
}

// Run-time scalars and vectors as oneDNN memory.
memory runtime_values(dt type, int64_t n, const void* data) {
  return wrap(memory::desc({n}, type, tag::x), data);
}

// Plain int8 weights into a primitive's layout (oneDNN computes the compensation terms on the way).
void reorder_weights(const memory::desc& plain_desc, const void* plain_data, const memory::desc& layout, void* out) {
  memory plain = wrap(plain_desc, plain_data), prepared = wrap(layout, out);
  dnnl::stream s(engine());
  dnnl::reorder(plain, prepared).execute(s, plain, prepared);
  s.wait();
}

// Made-up operands for trying a primitive out: activations and weights of
// every value the call can hold (7-bit weights, which every instruction set
// multiplies exactly), biases, and zero points where the call has them.
struct TrialData {
  std::vector<uint8_t> x, w;
  std::vector<int32_t> bias;
  int32_t x_zero, y_zero;
  TrialData(const QuantizedConvCall& c, const ConvDescs& d)
      : x(d.src.get_size()), w(d.wei.get_size()), bias(static_cast<size_t>(c.shape.o)),
        x_zero(c.x_zero_point ? (c.x_signed ? -3 : 121) : 0), y_zero(c.y_signed ? 2 : 100) {
    uint32_t state = 12345;
    auto next = [&state] { return state = state * 1664525u + 1013904223u, state >> 24; };
    for (uint8_t& v : x) v = static_cast<uint8_t>(next());
    for (uint8_t& v : w) v = static_cast<uint8_t>(static_cast<int8_t>(next() % 128) - 64);
    for (int32_t& v : bias) v = static_cast<int32_t>(next() * 8) - 1000;
  }
};

// What one run of p gives on the trial data, and the seconds a run takes
// (the best of `runs` after one to warm up; the one run where runs is 0).
struct Trial {
  std::vector<uint8_t> y;
  double seconds = 1e30;
};
Trial try_out(const ConvPrimitive& p, const QuantizedConvCall& c, const ConvDescs& d, const TrialData& data, int runs) {
  std::vector<uint8_t> w(p.wei.get_size()), scratch(std::max<size_t>(p.scratchpad.get_size(), 1));
  reorder_weights(d.wei, data.w.data(), p.wei, w.data());
  Trial t;
  t.y.resize(p.dst.get_size());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, wrap(p.src, data.x.data())},
      {DNNL_ARG_WEIGHTS, wrap(p.wei, w.data())},
      {DNNL_ARG_DST, wrap(p.dst, t.y.data())},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, runtime_values(dt::s32, 1, &data.y_zero)},
      {DNNL_ARG_SCRATCHPAD, wrap(p.scratchpad, scratch.data())}};
  if (c.x_zero_point) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, runtime_values(dt::s32, 1, &data.x_zero));
  if (c.bias) args.emplace(DNNL_ARG_BIAS, wrap(d.bias, data.bias.data()));
  dnnl::stream s(engine());
  for (int i = 0; i <= runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    p.prim.execute(s, args);
    s.wait();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0 || runs == 0) t.seconds = std::min(t.seconds, seconds);
  }
  return t;
}

// Whether two outputs agree: every value within one step (a tie in the
// float32 requantization rounds either way), and nearly all equal.
bool agree(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, bool is_signed) {
  if (a.size() != b.size()) return false;
  size_t equal = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int u = is_signed ? static_cast<int8_t>(a[i]) : a[i], v = is_signed ? static_cast<int8_t>(b[i]) : b[i];
    if (std::abs(u - v) > 1) return false;
    equal += u == v;
  }
  return equal * 100 >= a.size() * 99;
}

// The implementation oneDNN lists first is not always the fastest on this
// CPU: on an AMD Zen 5 its brgemm 1x1 kernels run layers of 16 to 32 input
// channels 10-15% slower than its older 1x1 kernels. A convolution on
// prepared weights (made once, run for long) tries the first few that read
// and write the layouts Kiln passes on the first one's instruction set, and
// keeps the fastest of those that give the first one's answer, where a run
// is short enough for the trials to cost little (a large batch's is not).
// The answer is checked because some do not: oneDNN 2.7's jit_int8 kernels
// gave wrong results for a 1x1 stride-2 layer with int8 input and a zero
// point, and an AVX2 kernel picked past AVX-512 ones for 3x3 layers.
ConvPrimitive fastest(dnnl::convolution_forward::primitive_desc pd, const QuantizedConvCall& c, const ConvDescs& d) {
  constexpr int kCandidates = 3, kRuns = 3;
  constexpr double kTriedUpTo = 2e-3;  // seconds a run may take for alternatives to be tried
  ConvPrimitive best = primitive_of(pd);
  if (!c.prepared_weights || !(best.src == d.src) || !(best.dst == d.dst)) return best;
  const TrialData data(c, d);
  const Trial first = try_out(best, c, d, data, 0);
  if (first.seconds > kTriedUpTo) return best;
  double best_seconds = try_out(best, c, d, data, kRuns).seconds;
  auto isa = [](const std::string& name) { return name.substr(name.find(':') + 1); };
  const std::string first_isa = isa(pd.impl_info_str());
  for (int tried = 1; tried < kCandidates && pd.next_impl();) {
    const std::string name = pd.impl_info_str();
    if (isa(name) != first_isa || !(pd.src_desc() == d.src) || !(pd.dst_desc() == d.dst)) continue;
    ++tried;
    ConvPrimitive other = primitive_of(pd);
    const Trial t = try_out(other, c, d, data, kRuns);
    if (t.seconds < best_seconds && agree(t.y, first.y, c.y_signed)) best = std::move(other), best_seconds = t.seconds;
  }
  return best;
}

// Null when oneDNN refuses the geometry.
const ConvPrimitive* conv_primitive(const QuantizedConvCall& c, const float* scale_values) {
  const std::vector<float> scales(scale_values, scale_values + (c.per_channel ? c.shape.o : 1));
  static std::mutex mu;
  static std::map<ConvKey, ConvPrimitive> cache;
  // Weights prepared for one thread count's primitive are run by the
  // primitive of whichever count runs them: a geometry keeps the
  // implementation (and so the weights' layout) its first primitive chose.
  static std::map<ConvKey, std::pair<std::string, memory::desc>> chosen;  // keyed with 0 threads
  const ConvKey key = key_of(c, scales, get_num_threads()), any_threads = key_of(c, scales, 0);
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.prim ? &it->second : nullptr;
  ConvPrimitive p;
  ConvDescs d;
  if (conv_descs(c, d)) {
    try {
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           any(d.src), any(d.wei), d.bias, any(d.dst), d.strides, d.dilates, d.pad_l,
                                           d.pad_r);
      dnnl::convolution_forward::primitive_desc pd(desc, quantized_attr(c.per_channel ? 2 : 0, scales, c.x_zero_point),
                                                   engine());
      auto was = chosen.find(any_threads);
      if (was == chosen.end()) {
        p = fastest(pd, c, d);
        if (c.prepared_weights) chosen.emplace(any_threads, std::make_pair(p.implementation, p.wei));
      } else {
        p = primitive_of(pd);  // the first, where this count has no primitive of the chosen kind
        do {
          if (pd.impl_info_str() == was->second.first && pd.weights_desc() == was->second.second) {
            p = primitive_of(pd);
            break;
          }
        } while (pd.next_impl());
      }
    } catch (const dnnl::error&) {
      p = {};
    }
  }
  auto& stored = cache.emplace(key, std::move(p)).first->second;
  return stored.prim ? &stored : nullptr;
}

// A layout in words (dimensions, strides, blocks, compensation): equal strings, equal layouts.
std::string describe(const memory::desc& m) {
  const dnnl_memory_desc_t& d = m.data;
  std::ostringstream s;
  s << "int8";
  for (int i = 0; i < d.ndims; ++i) s << ' ' << d.padded_dims[i] << '/' << d.format_desc.blocking.strides[i];
  for (int i = 0; i < d.format_desc.blocking.inner_nblks; ++i)
    s << " b" << d.format_desc.blocking.inner_idxs[i] << ':' << d.format_desc.blocking.inner_blks[i];
  s << " x" << d.extra.flags << ':' << d.extra.compensation_mask << ':' << d.extra.asymm_compensation_mask;
  return s.str();
}

Tensor scratch_for(const memory::desc& d) {
  return Tensor::empty({static_cast<int64_t>(std::max<size_t>(d.get_size(), 1))}, DType::UInt8);
}

}  // namespace

bool quantized_conv_forward(const QuantizedConvCall& c, const void* x, int32_t x_zero, const void* w,
                            const float* scales, const int32_t* bias, int32_t y_zero, void* y, PrimitiveMemo* memo) {
  const ConvPrimitive* p = PrimitiveMemo::find_or_make<ConvPrimitive>(memo, get_num_threads(),
                                                                       [&] { return conv_primitive(c, scales); });
  if (!p) return false;
  ConvDescs d;
  conv_descs(c, d);
  const bool blocked_weights = !c.prepared_weights && !(d.wei == p->wei);
  if (d.src == p->src && d.dst == p->dst && !blocked_weights) {
    static const memory::desc one_s32({1}, dt::s32, tag::x);
    CallArgs args;
    args.buffer(DNNL_ARG_SRC, d.src, x).buffer(DNNL_ARG_WEIGHTS, p->wei, w).buffer(DNNL_ARG_DST, d.dst, y);
    args.value(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, one_s32, y_zero);
    if (c.x_zero_point) args.value(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, one_s32, x_zero);
    if (c.bias) args.buffer(DNNL_ARG_BIAS, d.bias, bias);
    execute(p->prim, args.scratchpad(p->scratchpad));
    return true;
  }
  // Plain activations for a primitive that wants them blocked: reordered on the way.
  dnnl::stream s(engine());
  std::vector<Tensor> scratch;  // blocked copies, from Kiln's caching allocator
  auto in_layout = [&](const memory::desc& plain, const memory::desc& wanted, const void* data) {
    memory m = wrap(plain, data);
    if (plain == wanted) return m;
    scratch.push_back(scratch_for(wanted));
    memory blocked = wrap(wanted, scratch.back().raw_data());
    dnnl::reorder(m, blocked).execute(s, m, blocked);
    return blocked;
  };
  memory src = in_layout(d.src, p->src, x);
  memory wei = c.prepared_weights ? wrap(p->wei, w) : in_layout(d.wei, p->wei, w);
  memory dst_plain = wrap(d.dst, y);
  memory dst = dst_plain;
  if (!(d.dst == p->dst)) {
    scratch.push_back(scratch_for(p->dst));
    dst = wrap(p->dst, scratch.back().raw_data());
  }
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src},
      {DNNL_ARG_WEIGHTS, wei},
      {DNNL_ARG_DST, dst},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, runtime_values(dt::s32, 1, &y_zero)}};
  if (c.x_zero_point) args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, runtime_values(dt::s32, 1, &x_zero));
  if (c.bias) args.emplace(DNNL_ARG_BIAS, wrap(d.bias, bias));
  if (p->scratchpad.get_size() > 0) {
    scratch.push_back(scratch_for(p->scratchpad));
    args.emplace(DNNL_ARG_SCRATCHPAD, wrap(p->scratchpad, scratch.back().raw_data()));
  }
  p->prim.execute(s, args);
  if (!(dst == dst_plain)) dnnl::reorder(dst, dst_plain).execute(s, dst, dst_plain);
  s.wait();
  return true;
}

int64_t quantized_weights_bytes(const QuantizedConvCall& c, const float* scales) {
  const ConvPrimitive* p = conv_primitive(c, scales);
  return p ? static_cast<int64_t>(p->wei.get_size()) : 0;
}

std::string quantized_weights_layout(const QuantizedConvCall& c, const float* scales) {
  const ConvPrimitive* p = conv_primitive(c, scales);
  return p ? describe(p->wei) : "";
}

void prepare_quantized_weights(const QuantizedConvCall& c, const float* scales, const int8_t* w, void* out) {
  const ConvPrimitive* p = conv_primitive(c, scales);
  KILN_CHECK(p != nullptr, "no int8 convolution primitive for these weights");
  ConvDescs d;
  conv_descs(c, d);
  reorder_weights(d.wei, w, p->wei, out);
}

namespace {

struct MatmulDescs {
  memory::desc a, b, bias, y, vector, residual;
};
MatmulDescs matmul_descs(const QuantizedMatmulCall& c) {
  const auto& dq = c.dequantized;
  return {memory::desc({c.m, c.k}, activation_type(c.a_signed), tag::ab), memory::desc({c.k, c.n}, dt::s8, tag::ab),
          c.bias ? memory::desc({1, c.n}, dt::s32, tag::ab) : memory::desc(),
          memory::desc({c.m, c.n},
                       dq.requantize ? activation_type(dq.q_signed) : dq.on ? dt::f32 : activation_type(c.y_signed),
                       tag::ab),
          dq.add_vector ? memory::desc({1, c.n}, dt::f32, tag::ab) : memory::desc(),
          dq.add_residual ? memory::desc({c.m, c.n}, dt::f32, tag::ab) : memory::desc()};
}

// The attributes of a matmul: its requantization, and for a dequantized
// output the integer output's own steps as post-ops on the float result:
// the zero point added as the integer epilogue adds it, rounding to nearest
// even, saturation, the zero point taken off again (exact on integers), the
// scale; then the vector, the residual and the ReLU; to requantize, the division by the
// next scale, rounding, and that zero point (the 8-bit output's conversion
// saturates). oneDNN 2.7 gives every eltwise_linear of one chain the first
// one's constants, so past the first the steps are binary ops with one-value
// operands (quantized_matmul gives them).
struct DequantizeSteps {
  // post-op indices of the binary steps
  int minus_zero = -1, scale = -1, vector = -1, residual = -1, divide = -1, plus_zero = -1;
};
DequantizeSteps dequantize_steps(const QuantizedMatmulCall& c, dnnl::post_ops* ops) {
  using alg = dnnl::algorithm;
  const auto& dq = c.dequantized;
  const memory::desc one({1, 1}, dt::f32, tag::ab);
  DequantizeSteps at;
  int next = 0;
  auto eltwise = [&](alg a, float alpha, float beta) {
    if (ops) ops->append_eltwise(1.0f, a, alpha, beta);
    ++next;
  };
  auto binary = [&](alg a, const memory::desc& d) {
    if (ops) ops->append_binary(a, d);
    return next++;
  };
  if (dq.y_zero != 0) eltwise(alg::eltwise_linear, 1.0f, static_cast<float>(dq.y_zero));
  eltwise(alg::eltwise_round, 0.0f, 0.0f);
  eltwise(alg::eltwise_clip, c.y_signed ? -128.0f : 0.0f, c.y_signed ? 127.0f : 255.0f);
  if (dq.y_zero != 0) at.minus_zero = binary(alg::binary_add, one);
  at.scale = binary(alg::binary_mul, one);
  if (dq.add_vector) at.vector = binary(alg::binary_add, memory::desc({1, c.n}, dt::f32, tag::ab));
  if (dq.add_residual) at.residual = binary(alg::binary_add, memory::desc({c.m, c.n}, dt::f32, tag::ab));
  if (dq.relu) eltwise(alg::eltwise_relu, 0.0f, 0.0f);
  if (dq.requantize) {
    at.divide = binary(alg::binary_div, one);
    eltwise(alg::eltwise_round, 0.0f, 0.0f);
    if (dq.q_zero != 0) at.plus_zero = binary(alg::binary_add, one);
  }
  return at;
}

dnnl::primitive_attr matmul_attr(const QuantizedMatmulCall& c, const std::vector<float>& scales) {
  if (!c.dequantized.on) return quantized_attr(c.per_column ? 2 : 0, scales, true);
  dnnl::primitive_attr attr = base_attr();
  attr.set_output_scales(c.per_column ? 2 : 0, scales.empty() ? std::vector<float>{DNNL_RUNTIME_F32_VAL} : scales);
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops ops;
  dequantize_steps(c, &ops);
  attr.set_post_ops(ops);
  return attr;
}

struct MatmulPrimitive {
  dnnl::matmul prim;
  memory::desc weights, scratchpad;
};

// Plain weights with the scales given at run time (one primitive per shape),
// or, for weights prepared once, the primitive's own weight layout with the
// scales built in (oneDNN's brgemm kernels, several times faster at one row).
const MatmulPrimitive* matmul_primitive(const QuantizedMatmulCall& c, const float* scale_values) {
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool, bool, bool, int, std::vector<float>,
                         std::tuple<bool, float, int32_t, bool, bool, bool, float, int32_t, bool, bool>>;
  static std::mutex mu;
  static std::map<Key, MatmulPrimitive> cache;
  std::vector<float> scales;
  if (c.prepared_weights) scales.assign(scale_values, scale_values + (c.per_column ? c.n : 1));
  const auto& dq = c.dequantized;
  const Key key{c.m, c.k, c.n, c.a_signed, c.y_signed, c.per_column, c.bias, c.prepared_weights, get_num_threads(), scales,
                {dq.on, dq.y_scale, dq.y_zero, dq.add_vector, dq.relu, dq.requantize, dq.q_scale, dq.q_zero,
                 dq.q_signed, dq.add_residual}};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    const MatmulDescs d = matmul_descs(c);
    MatmulPrimitive made;
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, c.prepared_weights ? any(d.b) : d.b, d.bias, d.y),
                                      matmul_attr(c, scales), engine());
      made = {dnnl::matmul(pd), pd.weights_desc(), pd.scratchpad_desc()};
    } catch (const dnnl::error&) {
      made = {};
    }
    it = cache.emplace(key, std::move(made)).first;
  }
  return it->second.prim ? &it->second : nullptr;
}

}  // namespace

bool quantized_matmul(const QuantizedMatmulCall& c, const void* a, int32_t a_zero, const void* b, const float* scales,
                      const int32_t* bias, int32_t y_zero, void* y, const float* vector, const float* residual,
                      PrimitiveMemo* memo) {
  const MatmulPrimitive* p = PrimitiveMemo::find_or_make<MatmulPrimitive>(memo, get_num_threads(),
                                                                           [&] { return matmul_primitive(c, scales); });
  if (!p) return false;
  const MatmulDescs d = matmul_descs(c);
  static const memory::desc one_s32({1}, dt::s32, tag::x), one_f32({1, 1}, dt::f32, tag::ab);
  const memory::desc column_scales({c.per_column ? c.n : 1}, dt::f32, tag::x);
  CallArgs args;
  args.buffer(DNNL_ARG_SRC, d.a, a).buffer(DNNL_ARG_WEIGHTS, c.prepared_weights ? p->weights : d.b, b);
  args.buffer(DNNL_ARG_DST, d.y, y).value(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, one_s32, a_zero);
  if (!c.dequantized.on) args.value(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, one_s32, y_zero);
  if (c.dequantized.on) {
    // The dequantization's one-value operands, and the vector.
    const DequantizeSteps at = dequantize_steps(c, nullptr);
    auto operand = [&](int post_op) { return DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1; };
    if (at.minus_zero >= 0) args.value(operand(at.minus_zero), one_f32, -static_cast<float>(c.dequantized.y_zero));
    if (at.scale >= 0) args.value(operand(at.scale), one_f32, c.dequantized.y_scale);
    if (at.vector >= 0) args.buffer(operand(at.vector), d.vector, vector);
    if (at.residual >= 0) args.buffer(operand(at.residual), d.residual, residual);
    if (at.divide >= 0) args.value(operand(at.divide), one_f32, c.dequantized.q_scale);
    if (at.plus_zero >= 0) args.value(operand(at.plus_zero), one_f32, static_cast<float>(c.dequantized.q_zero));
  }
  if (!c.prepared_weights) args.buffer(DNNL_ARG_ATTR_OUTPUT_SCALES, column_scales, scales);
  if (c.bias) args.buffer(DNNL_ARG_BIAS, d.bias, bias);
  execute(p->prim, args.scratchpad(p->scratchpad));
  return true;
}

int64_t quantized_matmul_weights_bytes(const QuantizedMatmulCall& c, const float* scales) {
  const MatmulPrimitive* p = matmul_primitive(c, scales);
  return p ? static_cast<int64_t>(p->weights.get_size()) : 0;
}

std::string quantized_matmul_weights_layout(const QuantizedMatmulCall& c, const float* scales) {
  const MatmulPrimitive* p = matmul_primitive(c, scales);
  return p ? describe(p->weights) : "";
}

void prepare_quantized_matmul_weights(const QuantizedMatmulCall& c, const float* scales, const int8_t* b, void* out) {
  const MatmulPrimitive* p = matmul_primitive(c, scales);
  KILN_CHECK(p != nullptr, "no int8 matmul primitive for these weights");
  reorder_weights(matmul_descs(c).b, b, p->weights, out);
}

std::vector<float> requantization_scales(const Tensor& x_scale, const Tensor& w_scale, const Tensor& y_scale) {
  const Tensor ws = w_scale.contiguous();
  const float xs = x_scale.contiguous().data<float>()[0], ys = y_scale.contiguous().data<float>()[0];
  std::vector<float> s(static_cast<size_t>(ws.numel()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = xs * ws.data<float>()[i] / ys;
  return s;
}

float scale_of(const Tensor& scale) { return scale.contiguous().data<float>()[0]; }

std::vector<float> integer_to_float_scales(float a_scale, const Tensor& b_scale, int64_t n) {
  const Tensor b = b_scale.contiguous();
  std::vector<float> scales(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) scales[j] = a_scale * b.data<float>()[b.numel() == 1 ? 0 : j];
  return scales;
}

int32_t zero_point_of(const Tensor& zero_point) {
  const Tensor z = zero_point.contiguous();
  return z.dtype() == DType::Int8 ? z.data<int8_t>()[0] : z.data<uint8_t>()[0];
}

bool int8_products_exact(const int8_t* w, int64_t n, bool signed_input) {
  static const bool vnni = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx2_vnni || isa == dnnl::cpu_isa::avx512_core_vnni ||
           isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  if (vnni) return true;
  if (signed_input) return false;
  return std::all_of(w, w + n, [](int8_t v) { return v >= -64 && v <= 63; });
}

bool int8_isa_is_avx512_vnni() {
  static const bool fits = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_vnni || isa == dnnl::cpu_isa::avx512_core_bf16;
  }();
  return fits;
}

bool int8_isa_has_avx512_vnni() {
  static const bool has = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return int8_isa_is_avx512_vnni() || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return has;
}

}  // namespace kiln::cpu::onednn

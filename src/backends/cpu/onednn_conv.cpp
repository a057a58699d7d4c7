#include "backends/cpu/onednn_conv.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/onednn_call.h"
#include "backends/cpu/onednn_engine.h"
#include "ops/dispatch_hooks.h"
#include "kiln/error.h"
#include "kiln/tensor.h"

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Geometry {
  memory::desc src, wei, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// oneDNN counts dilation from 0 and needs the right padding that makes the
// output size come out exactly. That padding is negative when a strided window
// leaves input rows unused (a 1x1 stride-2 convolution of an even size);
// oneDNN accepts it, and a primitive it refuses falls back to im2col.
bool geometry(const ConvShape& s, bool with_bias, Geometry& g) {
  int64_t pr_h = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h - s.ph;
  int64_t pr_w = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pw;
  if (pr_h <= -s.sh || pr_w <= -s.sw) return false;
  g.src = memory::desc({s.n, s.c, s.h, s.w}, dt::f32, tag::nchw);
  g.dst = memory::desc({s.n, s.o, s.oh, s.ow}, dt::f32, tag::nchw);
  if (s.groups == 1) {
    g.wei = memory::desc({s.o, s.c, s.kh, s.kw}, dt::f32, tag::oihw);
  } else {
    g.wei = memory::desc({s.groups, s.o / s.groups, s.c / s.groups, s.kh, s.kw}, dt::f32, tag::goihw);
  }
  g.bias = with_bias ? memory::desc({s.o}, dt::f32, tag::x) : memory::desc();
  g.strides = {s.sh, s.sw};
  g.dilates = {s.dh - 1, s.dw - 1};
  g.pad_l = {s.ph, s.pw};
  g.pad_r = {pr_h, pr_w};
  return true;
}

// A primitive splits its work for the thread count it was built under (and
// runs on that many), so the count is part of the key.
using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int>;
Key key_of(int kind, bool bias, const ConvShape& s) {
  return {kind, bias, s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.oh, s.ow, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.groups,
          get_num_threads()};
}

// Layout choice for the primitive's tensors: Kiln's plain layouts, or the
// blocked ones oneDNN prefers (which then need reorders on the way in and out).
memory::desc layout(const memory::desc& plain, bool blocked) {
  return blocked ? memory::desc(plain.dims(), dt::f32, tag::any) : plain;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Geometry& g, bool blocked) {
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                    layout(g.src, blocked), layout(g.wei, blocked), g.bias, layout(g.dst, blocked),
                                    g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, base_attr(), engine());
}

// A primitive with the layouts it chose for its tensor arguments. Kiln's
// tensors are plain, so arguments in other layouts are reordered.
struct Prepared {
  dnnl::primitive prim;
  std::map<int, memory::desc> layouts;
  memory::desc scratchpad = {};
  std::string implementation = {};  // oneDNN's name for the kernel it chose
};

template <typename Primitive>
Prepared prepare(const typename Primitive::primitive_desc& pd, std::map<int, memory::desc> layouts) {
  return Prepared{Primitive(pd), std::move(layouts), pd.scratchpad_desc(), pd.impl_info_str()};
}

struct Arg {
  int id;
  memory::desc plain;
  const void* data;
  bool output;
};

// Runs the primitive on plain-layout buffers, reordering where its layouts differ.
void run(const Prepared& p, const std::vector<Arg>& args) {
  const bool as_given = std::all_of(args.begin(), args.end(), [&](const Arg& a) {
    auto it = p.layouts.find(a.id);
    return it == p.layouts.end() || it->second == a.plain;
  });
  if (as_given) {
    CallArgs bound;
    for (const Arg& a : args) bound.buffer(a.id, a.plain, a.data);
    execute(p.prim, bound.scratchpad(p.scratchpad));
    return;
  }
  dnnl::stream s(engine());
  std::unordered_map<int, memory> bound;
  std::vector<std::pair<memory, memory>> write_back;  // (blocked, plain)
  std::vector<Tensor> scratch;
  for (const Arg& a : args) {
    memory plain = wrap(a.plain, a.data);
    auto it = p.layouts.find(a.id);
    if (it == p.layouts.end() || it->second == a.plain) {
      bound.emplace(a.id, plain);
      continue;
    }
    // Temporary blocked copies come from Kiln's caching allocator.
    scratch.push_back(Tensor::empty({static_cast<int64_t>(it->second.get_size())}, DType::UInt8));
    memory blocked = wrap(it->second, scratch.back().raw_data());
    if (!a.output) dnnl::reorder(plain, blocked).execute(s, plain, blocked);
    else write_back.emplace_back(blocked, plain);
    bound.emplace(a.id, blocked);
  }
  if (p.scratchpad.get_size() > 0) {
    scratch.push_back(Tensor::empty({static_cast<int64_t>(p.scratchpad.get_size())}, DType::UInt8));
    bound.emplace(DNNL_ARG_SCRATCHPAD, wrap(p.scratchpad, scratch.back().raw_data()));
  }
  p.prim.execute(s, bound);
  for (auto& [blocked, plain] : write_back) dnnl::reorder(blocked, plain).execute(s, blocked, plain);
  s.wait();
}

double seconds_to_run(const Prepared& p, const std::vector<Arg>& args) {
  auto start = std::chrono::steady_clock::now();
  run(p, args);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::mutex g_mu;
std::map<Key, Prepared>& cache() {
  static std::map<Key, Prepared> c;
  return c;
}
std::set<Key>& unsupported() {
  static std::set<Key> u;
  return u;
}

// Runs the cached primitive for `key`. The first call for a geometry builds
// the plain-layout and the blocked-layout variants, times both on the real
// arguments and keeps the faster: blocked wins for wide layers, plain for
// thin ones where the reorders cost more than they save.
template <typename Make>
bool run_cached(const Key& key, Make make, const std::vector<Arg>& args) {
  Prepared chosen;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (unsupported().count(key)) return false;
    auto it = cache().find(key);
    if (it != cache().end()) {
      chosen = it->second;
    } else {
      Prepared plain, blocked;
      try {
        plain = make(false);
        if (!kiln::detail::tracing_this_thread()) blocked = make(true);
      } catch (const dnnl::error&) {
        unsupported().insert(key);
        return false;  // a geometry oneDNN does not implement: the caller falls back
      }
      // A run being traced only records the program: graph mode chooses its
      // own layouts later, so it runs plain and decides nothing (timing both
      // took most of compiling a batch-64 ResNet).
      if (kiln::detail::tracing_this_thread()) {
        run(plain, args);
        return true;
      }
      // Best of three after a warm-up run each (the first pays for page faults
      // and oneDNN's kernel generation), so one noisy run does not decide.
      seconds_to_run(plain, args);
      seconds_to_run(blocked, args);
      double t_plain = 1e30, t_blocked = 1e30;
      for (int i = 0; i < 3; ++i) {
        t_plain = std::min(t_plain, seconds_to_run(plain, args));
        t_blocked = std::min(t_blocked, seconds_to_run(blocked, args));
      }
      bool use_blocked = t_blocked < t_plain;
      chosen = use_blocked ? blocked : plain;
      cache().emplace(key, chosen);
      // The last timing run was the blocked variant; its output stands only if
      // it won, so every call of a geometry uses one algorithm (same bits).
      if (use_blocked) return true;
    }
  }
  run(chosen, args);
  return true;
}

}  // namespace

bool conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y, bool relu) {
  Geometry g;
  if (!geometry(s, bias != nullptr, g)) return false;
  std::vector<Arg> args{{DNNL_ARG_SRC, g.src, x, false}, {DNNL_ARG_WEIGHTS, g.wei, w, false}, {DNNL_ARG_DST, g.dst, y, true}};
  if (bias) args.push_back({DNNL_ARG_BIAS, g.bias, bias, false});
  const bool ran = run_cached(key_of(0, bias != nullptr, s), [&](bool blocked) {
    auto pd = forward_pd(g, blocked);
    return prepare<dnnl::convolution_forward>(pd, {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_WEIGHTS, pd.weights_desc()}, {DNNL_ARG_DST, pd.dst_desc()}});
  }, args);
  if (ran && relu) relu_after_primitive(y, s.n * s.o * s.oh * s.ow);
  return ran;
}

bool conv_backward_data(const ConvShape& s, const float* gy, const float* w, float* gx) {
  Geometry g;
  if (!geometry(s, false, g)) return false;
  return run_cached(key_of(1, false, s), [&](bool blocked) {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, layout(g.src, blocked),
                                            layout(g.wei, blocked), layout(g.dst, blocked), g.strides, g.dilates,
                                            g.pad_l, g.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(d, base_attr(), engine(), forward_pd(g, blocked));
    return prepare<dnnl::convolution_backward_data>(pd, {{DNNL_ARG_DIFF_DST, pd.diff_dst_desc()}, {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                        {DNNL_ARG_DIFF_SRC, pd.diff_src_desc()}});
  }, {{DNNL_ARG_DIFF_DST, g.dst, gy, false}, {DNNL_ARG_WEIGHTS, g.wei, w, false}, {DNNL_ARG_DIFF_SRC, g.src, gx, true}});
}

bool conv_backward_weights(const ConvShape& s, const float* x, const float* gy, float* gw, float* gb) {
  Geometry g;
  if (!geometry(s, gb != nullptr, g)) return false;
  std::vector<Arg> args{{DNNL_ARG_SRC, g.src, x, false}, {DNNL_ARG_DIFF_DST, g.dst, gy, false},
                        {DNNL_ARG_DIFF_WEIGHTS, g.wei, gw, true}};
  if (gb) args.push_back({DNNL_ARG_DIFF_BIAS, g.bias, gb, true});
  return run_cached(key_of(2, gb != nullptr, s), [&](bool blocked) {
    auto d = gb ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, layout(g.src, blocked),
                                                           layout(g.wei, blocked), g.bias, layout(g.dst, blocked),
                                                           g.strides, g.dilates, g.pad_l, g.pad_r)
                : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, layout(g.src, blocked),
                                                           layout(g.wei, blocked), layout(g.dst, blocked), g.strides,
                                                           g.dilates, g.pad_l, g.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(d, base_attr(), engine(), forward_pd(g, blocked));
    return prepare<dnnl::convolution_backward_weights>(pd, {{DNNL_ARG_SRC, pd.src_desc()}, {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()},
                        {DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()}});
  }, args);
}

namespace {

memory::desc activation_desc(int64_t n, int64_t c, int64_t h, int64_t w, int block) {
  tag t = block == 16 ? tag::nChw16c : block == 8 ? tag::nChw8c : tag::nchw;
  return memory::desc({n, c, h, w}, dt::f32, t);
}

// ReLU is a pass after the primitive; hard-swish, hard-sigmoid and SiLU are post-ops.
using LayoutKey = std::tuple<Key, int, int, bool, bool, bool, bool>;
std::map<LayoutKey, Prepared>& layout_cache() {
  static std::map<LayoutKey, Prepared> c;
  return c;
}

}  // namespace

int preferred_block() {
  static const int block = [] {
    // What oneDNN picks for a typical 3x3 convolution when free to choose.
    ConvShape s{8, 64, 14, 14, 64, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, 1};
    Geometry g;
    geometry(s, false, g);
    memory::desc dst = forward_pd(g, true).dst_desc();
    if (dst == activation_desc(8, 64, 14, 14, 16)) return 16;
    if (dst == activation_desc(8, 64, 14, 14, 8)) return 8;
    return 0;
  }();
  return block;
}

namespace {

// The primitive for a layout choice, built once; null when oneDNN cannot
// express it. Activations (src / dst and their gradients) are in the layouts
// asked for; weights stay plain for Kiln, and run() reorders them to what the
// primitive chose.
const Prepared* layout_primitive(const LayoutCall& c, Geometry& g) {
  const ConvShape& s = c.shape;
  if (!geometry(s, c.bias, g)) return nullptr;
  g.src = activation_desc(s.n, s.c, s.h, s.w, c.src_block);
  g.dst = activation_desc(s.n, s.o, s.oh, s.ow, c.dst_block);
  LayoutKey key{key_of(4 + static_cast<int>(c.kind), c.bias, s), c.src_block, c.dst_block, c.residual, c.hardswish,
                c.hardsigmoid, c.swish};
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = layout_cache().find(key);
  if (it != layout_cache().end()) return it->second.prim ? &it->second : nullptr;
  Prepared p;
  try {
    const auto any_weights = layout(g.wei, true);
    if (c.kind == ConvPass::Forward) {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, g.src,
                                        any_weights, g.bias, g.dst, g.strides, g.dilates, g.pad_l, g.pad_r);
      dnnl::post_ops ops;
      if (c.residual) ops.append_sum(1.0f);  // y = conv + y
      if (c.hardswish) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 0.0f, 0.0f);
      if (c.swish) ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);  // x * sigmoid(1 * x)
      if (c.hardsigmoid) {  // PyTorch's: clip(x / 6 + 1/2, 0, 1) (oneDNN 2 has no hard-sigmoid of its own)
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, 1.0f / 6, 0.5f);
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, 0.0f, 1.0f);
      }
      dnnl::primitive_attr attr = base_attr();
      attr.set_post_ops(ops);
      dnnl::convolution_forward::primitive_desc pd(d, attr, engine());
      p = prepare<dnnl::convolution_forward>(pd, {{DNNL_ARG_WEIGHTS, pd.weights_desc()}});
    } else {
      // The backward primitives take the forward one as a hint.
      dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, g.src,
                                         any_weights, g.bias, g.dst, g.strides, g.dilates, g.pad_l, g.pad_r);
      dnnl::convolution_forward::primitive_desc hint(fd, base_attr(), engine());
      if (c.kind == ConvPass::BackwardData) {
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, g.src, any_weights, g.dst,
                                                g.strides, g.dilates, g.pad_l, g.pad_r);
        dnnl::convolution_backward_data::primitive_desc pd(d, base_attr(), engine(), hint);
        p = prepare<dnnl::convolution_backward_data>(pd, {{DNNL_ARG_WEIGHTS, pd.weights_desc()}});
      } else {
        dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, g.src, any_weights, g.bias,
                                                   g.dst, g.strides, g.dilates, g.pad_l, g.pad_r);
        dnnl::convolution_backward_weights::primitive_desc pd(d, base_attr(), engine(), hint);
        p = prepare<dnnl::convolution_backward_weights>(pd, {{DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()}});
      }
    }
  } catch (const dnnl::error&) {
  }
  auto& stored = layout_cache().emplace(key, p).first->second;
  return stored.prim ? &stored : nullptr;
}

}  // namespace

bool conv_layout_is_fast(const LayoutCall& c) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  // oneDNN's reference kernels ("ref:any") are correct but orders of magnitude slower.
  return p != nullptr && p->implementation.rfind("ref", 0) != 0;
}

int64_t prepared_weights_bytes(const LayoutCall& c) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  if (!p || c.kind != ConvPass::Forward) return 0;
  return static_cast<int64_t>(p->layouts.at(DNNL_ARG_WEIGHTS).get_size());
}

std::string prepared_weights_layout(const LayoutCall& c) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  if (!p || c.kind != ConvPass::Forward) return "";
  const dnnl_memory_desc_t& d = p->layouts.at(DNNL_ARG_WEIGHTS).data;
  std::string s = "dims";
  for (int i = 0; i < d.ndims; ++i) s.append(" ").append(std::to_string(d.padded_dims[i]));
  if (d.format_kind != dnnl_blocked) return s.append(" format ").append(std::to_string(d.format_kind));
  s.append(" strides");
  for (int i = 0; i < d.ndims; ++i) s.append(" ").append(std::to_string(d.format_desc.blocking.strides[i]));
  s.append(" blocks");
  for (int i = 0; i < d.format_desc.blocking.inner_nblks; ++i)
    s.append(" ").append(std::to_string(d.format_desc.blocking.inner_idxs[i])).append(":").append(
        std::to_string(d.format_desc.blocking.inner_blks[i]));
  return s;
}

void prepare_weights(const LayoutCall& c, const float* w, void* out) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  KILN_CHECK(p && c.kind == ConvPass::Forward, "prepare_weights: oneDNN has no primitive for this convolution");
  memory plain = wrap(g.wei, w), prepared = wrap(p->layouts.at(DNNL_ARG_WEIGHTS), out);
  dnnl::stream s(engine());
  dnnl::reorder(plain, prepared).execute(s, plain, prepared);
  s.wait();
}

bool conv_forward_layout(const LayoutCall& c, const float* x, const float* w, const float* bias, float* y) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  if (!p || c.kind != ConvPass::Forward) return false;
  // Prepared weights are bound in the primitive's own layout: run() reorders nothing.
  const memory::desc& weights = c.prepared_weights ? p->layouts.at(DNNL_ARG_WEIGHTS) : g.wei;
  std::vector<Arg> args{{DNNL_ARG_SRC, g.src, x, false}, {DNNL_ARG_WEIGHTS, weights, w, false}, {DNNL_ARG_DST, g.dst, y, true}};
  if (bias) args.push_back({DNNL_ARG_BIAS, g.bias, bias, false});
  run(*p, args);
  if (c.relu) relu_after_primitive(y, static_cast<int64_t>(g.dst.get_size() / sizeof(float)), c.cap);
  return true;
}

bool conv_backward_data_layout(const LayoutCall& c, const float* gy, const float* w, float* gx) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  if (!p || c.kind != ConvPass::BackwardData) return false;
  run(*p, {{DNNL_ARG_DIFF_DST, g.dst, gy, false}, {DNNL_ARG_WEIGHTS, g.wei, w, false}, {DNNL_ARG_DIFF_SRC, g.src, gx, true}});
  return true;
}

bool conv_backward_weights_layout(const LayoutCall& c, const float* x, const float* gy, float* gw, float* gb) {
  Geometry g;
  const Prepared* p = layout_primitive(c, g);
  if (!p || c.kind != ConvPass::BackwardWeights) return false;
  std::vector<Arg> args{{DNNL_ARG_SRC, g.src, x, false}, {DNNL_ARG_DIFF_DST, g.dst, gy, false},
                        {DNNL_ARG_DIFF_WEIGHTS, g.wei, gw, true}};
  if (gb) args.push_back({DNNL_ARG_DIFF_BIAS, g.bias, gb, true});
  run(*p, args);
  return true;
}

void reorder_layout(int64_t n, int64_t c, int64_t h, int64_t w, int from_block, int to_block, const float* src,
                    float* dst) {
  memory from = wrap(activation_desc(n, c, h, w, from_block), src);
  memory to = wrap(activation_desc(n, c, h, w, to_block), dst);
  dnnl::stream s(engine());
  dnnl::reorder(from, to).execute(s, from, to);
  s.wait();
}

}  // namespace kiln::cpu::onednn

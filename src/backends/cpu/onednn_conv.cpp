#include "backends/cpu/onednn_conv.h"

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

namespace kiln::cpu::onednn {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Geometry {
  memory::desc src, wei, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// oneDNN counts dilation from 0 and needs the right padding that makes the
// output size come out exactly; negative right padding is left to the fallback.
bool geometry(const ConvShape& s, bool with_bias, Geometry& g) {
  int64_t pr_h = (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1 - s.h - s.ph;
  int64_t pr_w = (s.ow - 1) * s.sw + (s.kw - 1) * s.dw + 1 - s.w - s.pw;
  if (pr_h < 0 || pr_w < 0) return false;
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

using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;
Key key_of(int kind, bool bias, const ConvShape& s) {
  return {kind, bias, s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.oh, s.ow, s.sh, s.sw, s.ph, s.pw, s.dh, s.dw, s.groups};
}

dnnl::convolution_forward::primitive_desc forward_pd(const Geometry& g) {
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, g.src,
                                    g.wei, g.bias, g.dst, g.strides, g.dilates, g.pad_l, g.pad_r);
  return dnnl::convolution_forward::primitive_desc(d, engine());
}

std::mutex g_mu;
std::map<Key, dnnl::primitive>& cache() {
  static std::map<Key, dnnl::primitive> c;
  return c;
}

template <typename Make>
dnnl::primitive get(const Key& k, Make make) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = cache().find(k);
  if (it != cache().end()) return it->second;
  dnnl::primitive p = make();
  cache().emplace(k, p);
  return p;
}

memory wrap(const memory::desc& d, const void* p) { return memory(d, engine(), const_cast<void*>(p)); }

void run(dnnl::primitive& p, const std::unordered_map<int, memory>& args) {
  dnnl::stream s(engine());
  p.execute(s, args);
  s.wait();
}

}  // namespace

bool conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  Geometry g;
  if (!geometry(s, bias != nullptr, g)) return false;
  dnnl::primitive p = get(key_of(0, bias != nullptr, s), [&] { return dnnl::convolution_forward(forward_pd(g)); });
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, wrap(g.src, x)}, {DNNL_ARG_WEIGHTS, wrap(g.wei, w)}, {DNNL_ARG_DST, wrap(g.dst, y)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, wrap(g.bias, bias));
  run(p, args);
  return true;
}

bool conv_backward_data(const ConvShape& s, const float* gy, const float* w, float* gx) {
  Geometry g;
  if (!geometry(s, false, g)) return false;
  dnnl::primitive p = get(key_of(1, false, s), [&] {
    dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, g.src, g.wei, g.dst, g.strides,
                                            g.dilates, g.pad_l, g.pad_r);
    return dnnl::convolution_backward_data(dnnl::convolution_backward_data::primitive_desc(d, engine(), forward_pd(g)));
  });
  run(p, {{DNNL_ARG_DIFF_DST, wrap(g.dst, gy)}, {DNNL_ARG_WEIGHTS, wrap(g.wei, w)}, {DNNL_ARG_DIFF_SRC, wrap(g.src, gx)}});
  return true;
}

bool conv_backward_weights(const ConvShape& s, const float* x, const float* gy, float* gw) {
  Geometry g;
  if (!geometry(s, false, g)) return false;
  dnnl::primitive p = get(key_of(2, false, s), [&] {
    dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, g.src, g.wei, g.dst, g.strides,
                                               g.dilates, g.pad_l, g.pad_r);
    return dnnl::convolution_backward_weights(
        dnnl::convolution_backward_weights::primitive_desc(d, engine(), forward_pd(g)));
  });
  run(p, {{DNNL_ARG_SRC, wrap(g.src, x)}, {DNNL_ARG_DIFF_DST, wrap(g.dst, gy)}, {DNNL_ARG_DIFF_WEIGHTS, wrap(g.wei, gw)}});
  return true;
}

}  // namespace kiln::cpu::onednn

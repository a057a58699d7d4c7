// conv2d on the shapes of workload W2 (batch 64), forward and backward,
// against oneDNN's convolution primitives called directly (with the layouts
// oneDNN prefers, reordered once outside the timed loop: its best case).
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

struct Shape4 {
  int64_t n, c, h, w, o;
};
const Shape4 kConv1{64, 1, 28, 28, 32};   // conv(1->32, 3x3, pad 1) on 28x28
const Shape4 kConv2{64, 32, 14, 14, 64};  // conv(32->64, 3x3, pad 1) on 14x14

double conv_flops(const Shape4& s) { return 2.0 * s.n * s.o * s.h * s.w * s.c * 9; }

void set_rate(benchmark::State& state, double flops) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

const Shape4& shape_of(benchmark::State& state) { return state.range(0) == 1 ? kConv1 : kConv2; }

kiln::Attrs conv_attrs() {
  return {{"stride", std::vector<int64_t>{1, 1}}, {"padding", std::vector<int64_t>{1, 1}},
          {"dilation", std::vector<int64_t>{1, 1}}, {"groups", int64_t{1}}};
}

void BM_kiln_forward(benchmark::State& state) {
  const Shape4& s = shape_of(state);
  auto x = kiln::randn({s.n, s.c, s.h, s.w}), w = kiln::randn({s.o, s.c, 3, 3}), b = kiln::randn({s.o});
  kiln::ConvOptions o;
  o.padding = {1, 1};
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, w, b, o).raw_data());
  set_rate(state, conv_flops(s));
}

void BM_kiln_backward(benchmark::State& state) {
  const Shape4& s = shape_of(state);
  auto x = kiln::randn({s.n, s.c, s.h, s.w}), w = kiln::randn({s.o, s.c, 3, 3});
  auto gy = kiln::randn({s.n, s.o, s.h, s.w});
  kiln::Attrs a = conv_attrs();
  kiln::Attrs ai = a, aw = a;
  ai.set("input_shape", x.shape());
  aw.set("weight_shape", w.shape());
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::call("conv2d_input_grad", {gy, w}, ai)[0].raw_data());
    benchmark::DoNotOptimize(kiln::call("conv2d_weight_grad", {x, gy}, aw)[0].raw_data());
    benchmark::DoNotOptimize(kiln::sum(gy, {0, 2, 3}).raw_data());
  }
  set_rate(state, 2 * conv_flops(s));
}

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct OneDnnConv {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;

  explicit OneDnnConv(const Shape4& s) {
    memory::dims src{s.n, s.c, s.h, s.w}, wei{s.o, s.c, 3, 3}, bias{s.o}, dst{s.n, s.o, s.h, s.w};
    memory::dims strides{1, 1}, pad{1, 1};
    auto any = [](const memory::dims& d) { return memory::desc(d, dt::f32, tag::any); };
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                       any(src), any(wei), memory::desc(bias, dt::f32, tag::x), any(dst), strides, pad,
                                       pad);
    fwd_pd = dnnl::convolution_forward::primitive_desc(fd, eng);
    dnnl::convolution_backward_data::desc bd(dnnl::algorithm::convolution_direct, any(src), any(wei), any(dst), strides,
                                             pad, pad);
    bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(bd, eng, fwd_pd);
    dnnl::convolution_backward_weights::desc bw(dnnl::algorithm::convolution_direct, any(src), any(wei),
                                                memory::desc(bias, dt::f32, tag::x), any(dst), strides, pad, pad);
    bwd_weights_pd = dnnl::convolution_backward_weights::primitive_desc(bw, eng, fwd_pd);
  }
  memory filled(const memory::desc& d) {
    memory m(d, eng);
    std::memset(m.get_data_handle(), 0, d.get_size());
    float* p = static_cast<float*>(m.get_data_handle());
    for (size_t i = 0; i < d.get_size() / sizeof(float); ++i) p[i] = static_cast<float>((i * 7919) % 13) * 0.1f - 0.6f;
    return m;
  }
};

void BM_onednn_forward(benchmark::State& state) {
  const Shape4& s = shape_of(state);
  OneDnnConv c(s);
  auto src = c.filled(c.fwd_pd.src_desc()), wei = c.filled(c.fwd_pd.weights_desc());
  auto bias = c.filled(c.fwd_pd.bias_desc()), dst = c.filled(c.fwd_pd.dst_desc());
  dnnl::convolution_forward prim(c.fwd_pd);
  for (auto _ : state) {
    prim.execute(c.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}});
    c.strm.wait();
  }
  set_rate(state, conv_flops(s));
}

void BM_onednn_backward(benchmark::State& state) {
  const Shape4& s = shape_of(state);
  OneDnnConv c(s);
  auto diff_dst = c.filled(c.bwd_data_pd.diff_dst_desc()), wei = c.filled(c.bwd_data_pd.weights_desc());
  auto diff_src = c.filled(c.bwd_data_pd.diff_src_desc());
  auto src = c.filled(c.bwd_weights_pd.src_desc()), diff_dst_w = c.filled(c.bwd_weights_pd.diff_dst_desc());
  auto diff_wei = c.filled(c.bwd_weights_pd.diff_weights_desc()), diff_bias = c.filled(c.bwd_weights_pd.diff_bias_desc());
  dnnl::convolution_backward_data bd(c.bwd_data_pd);
  dnnl::convolution_backward_weights bw(c.bwd_weights_pd);
  for (auto _ : state) {
    bd.execute(c.strm, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, diff_src}});
    bw.execute(c.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst_w}, {DNNL_ARG_DIFF_WEIGHTS, diff_wei},
                        {DNNL_ARG_DIFF_BIAS, diff_bias}});
    c.strm.wait();
  }
  set_rate(state, 2 * conv_flops(s));
}

}  // namespace

BENCHMARK(BM_kiln_forward)->Name("conv_w2_forward/kiln")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_onednn_forward)->Name("conv_w2_forward/onednn")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_kiln_backward)->Name("conv_w2_backward/kiln")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_onednn_backward)->Name("conv_w2_backward/onednn")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  kiln::bench::initialize(&argc, argv);
  kiln::bench::RatioReporter reporter("GFLOP/s");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios("kiln", "onednn");
  std::printf("arg 1 = conv(1->32) on 64x1x28x28, arg 2 = conv(32->64) on 64x32x14x14; threads: %d\n",
              kiln::get_num_threads());
  return 0;
}

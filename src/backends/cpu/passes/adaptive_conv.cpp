// An inference convolution in a graph that runs at any batch size chooses
// its algorithm per size class of the batch (1, 2-3, 4-7, 8-15, ...) the
// first time it runs at one, timed there as the layout pass times it at the
// compile's own size, and keeps it. What wins at one image can lose at
// sixteen: the W2 CNN's 32 -> 64 layer with its pool takes 28 us on
// oneDNN's direct kernel and 34 by Winograd at batch 1, but 303 and 200 us
// at batch 16. Each algorithm's weights are made from the plain ones when
// it is first chosen, so a class costs memory only for what it runs.
#include <bit>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/conv_algorithm.h"
#include "backends/cpu/passes/layout_kernels.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "kiln/error.h"
#include "kiln/profiler.h"

namespace kiln::graph {

namespace onednn = cpu::onednn;

namespace {

// 1, 2-3, 4-7, 8-15, ... images: 1, 2, 3, 4, ...
int size_class_of(int64_t n) { return static_cast<int>(std::bit_width(static_cast<uint64_t>(n))); }

// Winograd's output tile for its two algorithms.
int tile_of(cpu::ConvAlgorithm algorithm) { return algorithm == cpu::ConvAlgorithm::Winograd2x2 ? 2 : 4; }

// Profiles show each call's algorithm as a range of this name.
const char* range_name(cpu::ConvAlgorithm algorithm) {
  switch (algorithm) {
    case cpu::ConvAlgorithm::Direct: return "conv: onednn direct";
    case cpu::ConvAlgorithm::Winograd2x2: return "conv: winograd 2x2";
    case cpu::ConvAlgorithm::Winograd4x4: return "conv: winograd 4x4";
    case cpu::ConvAlgorithm::PatchGemm: return "conv: patch gemm";
    case cpu::ConvAlgorithm::Depthwise: return "conv: depthwise";
  }
  return "convolution";
}

struct AdaptiveConv {
  onednn::LayoutCall call;  // where pooled, its relu is the one before the pool
  bool pooled = false;
  // What a batch size runs: the algorithm and its weights (undefined where
  // it reads them plain).
  struct Choice {
    cpu::ConvAlgorithm algorithm;
    Tensor weights;
  };
  std::mutex mu;
  // size class -> algorithm (one for every thread count, as
  // fastest_conv_algorithm's timing, so that the answers round alike)
  std::map<int, cpu::ConvAlgorithm> by_class;
  std::map<int64_t, Choice> by_batch;   // each batch size seen, so that a call looks up nothing else
  std::map<std::string, Tensor> forms;  // the weights each algorithm reads, by form

  const Choice& choice(const onednn::LayoutCall& c, const Tensor& plain) {
    auto known = by_batch.find(c.shape.n);
    if (known != by_batch.end()) return known->second;
    const int size_class = size_class_of(c.shape.n);
    auto it = by_class.find(size_class);
    const cpu::ConvAlgorithm algorithm = it != by_class.end() ? it->second : by_class[size_class] = choose(c);
    return by_batch[c.shape.n] = {algorithm, weights(algorithm, c, plain)};
  }

  // Timed at c's batch size; but past a GFLOP a run (a wide layer at a
  // large batch: ResNet-50's at 16 would time for seconds in the middle of
  // a call), the choice of the largest smaller class, where there is one,
  // is kept: such sizes keep their ranking.
  cpu::ConvAlgorithm choose(const onednn::LayoutCall& c) {
    const onednn::ConvShape& s = c.shape;
    const double work = 2.0 * s.n * s.o * s.oh * s.ow * (s.c / s.groups) * s.kh * s.kw;
    if (work > 1e9)
      for (auto it = by_class.rbegin(); it != by_class.rend(); ++it)
        if (it->first < size_class_of(s.n)) return it->second;
    return cpu::fastest_conv_algorithm(c, pooled);
  }

  // The weights `algorithm` reads at call c, from the plain [o, c, kh, kw]
  // ones, made once per form; undefined where it reads them plain.
  Tensor weights(cpu::ConvAlgorithm algorithm, const onednn::LayoutCall& c, const Tensor& plain) {
    const bool direct = algorithm == cpu::ConvAlgorithm::Direct;
    if (direct && onednn::prepared_weights_bytes(c) == 0) return Tensor();
    // (oneDNN's layout may depend on the batch; the others' do not)
    const std::string form = direct ? "onednn " + onednn::prepared_weights_layout(c) : range_name(algorithm);
    auto it = forms.find(form);
    if (it != forms.end()) return it->second;
    Tensor t;
    if (direct) {
      t = Tensor::empty({onednn::prepared_weights_bytes(c)}, DType::UInt8);
      onednn::prepare_weights(c, plain.data<float>(), t.raw_data());
    } else {
      t = Tensor::empty({cpu::own_weights_size(algorithm, c)});
      cpu::own_weights(algorithm, c, plain.data<float>(), t.data<float>());
    }
    return forms[form] = t;
  }
};


}  // namespace

CustomKernel adaptive_conv_kernel(const onednn::LayoutCall& call, bool pooled) {
  auto state = std::make_shared<AdaptiveConv>();
  state->call = call;
  state->pooled = pooled;
  return [state](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    AdaptiveConv& a = *state;
    const onednn::LayoutCall c = at_batch(a.call, in[0]);
    const onednn::ConvShape& s = c.shape;
    AdaptiveConv::Choice chosen;
    {
      std::lock_guard<std::mutex> lock(a.mu);
      chosen = a.choice(c, in[1]);
    }
    const cpu::ConvAlgorithm algorithm = chosen.algorithm;
    const Tensor& w = chosen.weights;
    profiler::Range shown(range_name(algorithm));
    const float* x = in[0].data<float>();
    const float* bias = c.bias ? in[2].data<float>() : nullptr;
    float* y = out[0].data<float>();
    if (c.residual && in.back().data<float>() != y)  // (not with a pool: winograd_pool)
      std::memcpy(y, in.back().data<float>(), static_cast<size_t>(in.back().numel()) * sizeof(float));
    if (algorithm == cpu::ConvAlgorithm::Winograd2x2 || algorithm == cpu::ConvAlgorithm::Winograd4x4) {
      cpu::winograd_conv(s, tile_of(algorithm), c.src_block, x, w.data<float>(), y,
                         {bias, c.relu, c.residual, a.pooled, c.swish});
      return;
    }
    // The others write the whole output and pool it after, the ReLU there.
    onednn::LayoutCall unpooled = c;
    unpooled.relu = c.relu && !a.pooled;
    Tensor full = a.pooled ? Tensor::empty({s.n * s.o * s.oh * s.ow}) : Tensor();
    float* target = a.pooled ? full.data<float>() : y;
    if (algorithm == cpu::ConvAlgorithm::PatchGemm) {
      cpu::patch_gemm_conv(unpooled, x, w.data<float>(), bias, target);
    } else if (algorithm == cpu::ConvAlgorithm::Depthwise) {
      cpu::blocked_depthwise_conv(unpooled, x, w.data<float>(), bias, target);
    } else {
      unpooled.prepared_weights = w.defined();
      const float* weights = w.defined() ? static_cast<const float*>(w.raw_data()) : in[1].data<float>();
      const bool ok = onednn::conv_forward_layout(unpooled, x, weights, bias, target);
      KILN_CHECK(ok, "oneDNN refused a blocked-layout convolution it accepted when the graph was built");
    }
    if (a.pooled)
      cpu::max_pool_blocked(target, y, s.n, s.o, s.oh, s.ow, s.oh / 2, s.ow / 2, c.dst_block,
                            cpu::PoolWindow{2, 2, 2, 2, 0, 0, 1, 1}, false, c.relu);
  };
}

}  // namespace kiln::graph

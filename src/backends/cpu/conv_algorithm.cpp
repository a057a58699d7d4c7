#include "backends/cpu/conv_algorithm.h"

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "kiln/functional.h"

namespace kiln::cpu {

ConvAlgorithm fastest_conv_algorithm(const onednn::LayoutCall& call) {
  const onednn::ConvShape& s = call.shape;
  const bool winograd = winograd_applies(s, call.src_block), patch_gemm = patch_gemm_applies(s, call.src_block);
  if (call.kind != onednn::ConvPass::Forward || call.src_block != call.dst_block || !(winograd || patch_gemm))
    return ConvAlgorithm::Direct;
  static std::mutex mu;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int, bool, bool, bool>;
  static std::map<Key, ConvAlgorithm> decided;
  const Key key{s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.sh, s.sw, s.ph, s.pw, s.dh, call.src_block, call.bias, call.relu,
                call.residual};
  std::lock_guard<std::mutex> lock(mu);
  auto it = decided.find(key);
  if (it != decided.end()) return it->second;
  // Each on the real sizes (any values: the time does not depend on them),
  // best of three after a warm-up run. In a network, megabytes of weights
  // arrive from memory, the other layers having pushed them out of the
  // caches; timed warm, Winograd's larger transformed weights would look
  // cheaper than they are. So where the weights are large, the caches are
  // flushed before each run.
  Tensor x = zeros({s.n * s.c * s.h * s.w}), w = zeros({s.o * s.c * s.kh * s.kw}), b = zeros({s.o});
  Tensor y = zeros({s.n * s.o * s.oh * s.ow});
  const float* bias = call.bias ? b.data<float>() : nullptr;
  const bool cold = w.numel() * 4 >= (2 << 20);
  Tensor flush = cold ? Tensor::empty({int64_t{48} << 18}) : Tensor();  // 48 MB, more than the last-level cache
  // A run of more than 20 ms is timed once after the warm-up: noise matters
  // less there, and compiling a batch-64 ResNet took 20 s of such timing.
  auto best_seconds = [&](auto&& run) {
    double best = 1e30;
    for (int i = 0, runs = 4; i < runs; ++i) {
      if (cold) std::memset(flush.raw_data(), i, static_cast<size_t>(flush.numel()) * 4);
      auto t0 = std::chrono::steady_clock::now();
      run();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i == 0 && t > 0.02) runs = 2;
      if (i > 0) best = std::min(best, t);
    }
    return best;
  };
  const double direct = best_seconds(
      [&] { onednn::conv_forward_layout(call, x.data<float>(), w.data<float>(), bias, y.data<float>()); });
  // Each time is weighed by what the algorithm costs besides: scratch for
  // both, and for Winograd weights 16/9 the size.
  ConvAlgorithm choice = ConvAlgorithm::Direct;
  double best = direct;
  if (patch_gemm) {
    Tensor packed = zeros({patch_gemm_weights_size(s)});
    double t = 1.05 * best_seconds(
        [&] { patch_gemm_conv(s, x.data<float>(), packed.data<float>(), bias, y.data<float>(), call.relu, call.residual); });
    if (t < best) choice = ConvAlgorithm::PatchGemm, best = t;
  }
  if (winograd) {
    for (int tile : {2, 4}) {
      Tensor u = zeros({winograd_weights_size(s, tile)});
      double t = (tile == 2 ? 1.12 : 1.2) * best_seconds([&] {
        winograd_conv(s, tile, call.src_block, x.data<float>(), u.data<float>(), bias, y.data<float>(), call.relu,
                      call.residual);
      });
      if (t < best) choice = tile == 2 ? ConvAlgorithm::Winograd2x2 : ConvAlgorithm::Winograd4x4, best = t;
    }
  }
  return decided[key] = choice;
}

}  // namespace kiln::cpu

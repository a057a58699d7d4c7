// The fused attention op against the same computation as separate ops
// (matmul, scale, mask, softmax, matmul), in the same run: inference (no
// gradient) and a training step (forward and backward), at W4's shape (batch
// 32, 4 heads, 128 positions, head size 32, causal) and a BERT-style one
// (batch 1, 12 heads, 128 positions, head size 64), and the batch-1 encoder
// of bench/peers (4 heads, 128 positions, head size 64), and the encoder of
// bench/peers/int8_latency.sh (8 heads, 128 positions, head size 32).
#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

using namespace kiln;

struct Shape4 {
  int64_t n, h, l, d;
};
const Shape4 kShapes[] = {{32, 4, 128, 32}, {1, 12, 128, 64}, {1, 4, 128, 64}, {1, 8, 128, 32}};

Tensor separate_ops(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  Tensor scores = matmul(q * (1.0 / std::sqrt(static_cast<double>(q.size(-1)))), k.transpose(-1, -2));
  if (causal) {
    const int64_t l = q.size(-2);
    scores = where(triu(ones({l, l}, DType::Bool), 1), scalar_tensor(-std::numeric_limits<double>::infinity()), scores);
  }
  return matmul(softmax(scores, -1), v);
}

template <bool Fused, bool Train>
void BM_attention(benchmark::State& state) {
  const Shape4 s = kShapes[state.range(0)];
  const bool causal = state.range(0) == 0;
  manual_seed(0);
  Tensor q = randn({s.n, s.h, s.l, s.d}), k = randn({s.n, s.h, s.l, s.d}), v = randn({s.n, s.h, s.l, s.d});
  if (Train)
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
  for (auto _ : state) {
    Tensor y = Fused ? scaled_dot_product_attention(q, k, v, Tensor(), causal) : separate_ops(q, k, v, causal);
    if (Train) {
      sum(y).backward();
      for (Tensor* t : {&q, &k, &v}) t->zero_grad();
    }
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.counters["calls/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // The two products' multiply-adds (forward; causal ones count in full).
  const double flops = 4.0 * static_cast<double>(s.n * s.h * s.l * s.l * s.d);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_attention<true, false>)->Name("attention/kiln/inference")->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_attention<false, false>)->Name("attention/ops/inference")->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_attention<true, true>)->Name("attention/kiln/train")->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_attention<false, true>)->Name("attention/ops/train")->DenseRange(0, 3)->UseRealTime();

int main(int argc, char** argv) {
  kiln::bench::initialize(&argc, argv);
  kiln::bench::RatioReporter reporter("calls/s");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios("/kiln/", "/ops/");
  std::printf(
      "shape 0: batch 32, 4 heads, 128 positions, head 32, causal (W4); 1: batch 1, 12 heads, 128, head 64; 2: batch "
      "1, 4 heads, 128, head 64; 3: batch 1, 8 heads, 128, head 32 (the int8 benchmark's encoder)\n");
  return 0;
}

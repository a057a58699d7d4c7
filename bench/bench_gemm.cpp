// GEMM through kiln::matmul against direct OpenBLAS and oneDNN calls.
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_kiln(benchmark::State& state) {
  int64_t n = state.range(0);
  auto a = kiln::randn({n, n}), b = kiln::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::matmul(a, b).raw_data());
  set_flops(state, n);
}

void BM_openblas(benchmark::State& state) {
  int64_t n = state.range(0);
  auto a = kiln::randn({n, n}), b = kiln::randn({n, n}), c = kiln::zeros({n, n});
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f,
                c.data<float>(), n);
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

void BM_onednn(benchmark::State& state) {
  int64_t n = state.range(0);
  auto a = kiln::randn({n, n}), b = kiln::randn({n, n}), c = kiln::zeros({n, n});
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f, c.data<float>(), n);
    benchmark::ClobberMemory();
  }
  set_flops(state, n);
}

}  // namespace

BENCHMARK(BM_kiln)->Name("gemm/kiln")->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_openblas)->Name("gemm/openblas")->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_onednn)->Name("gemm/onednn")->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  kiln::bench::initialize(&argc, argv);
  kiln::bench::RatioReporter reporter("GFLOP/s");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios("kiln", "openblas");
  reporter.print_ratios("kiln", "onednn");
  std::printf("threads: %d (KILN_NUM_THREADS); machine peak is about 105 GFLOP/s per core\n", kiln::get_num_threads());
  return 0;
}

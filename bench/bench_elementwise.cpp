// Memory-bound ops on 16M float32 elements against a plain parallel copy loop,
// in GB/s of data moved (reads + writes).
#include <omp.h>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

constexpr int64_t kN = int64_t{1} << 24;

void set_bytes(benchmark::State& state, double bytes_per_iter) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_copy_loop(benchmark::State& state) {
  auto a = kiln::randn({kN});
  auto c = kiln::Tensor::empty({kN});
  const float* pa = a.data<float>();
  float* pc = c.data<float>();
  for (auto _ : state) {
#pragma omp parallel for num_threads(kiln::get_num_threads())
    for (int64_t i = 0; i < kN; ++i) pc[i] = pa[i];
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * 4 * kN);
}

void BM_add(benchmark::State& state) {
  auto a = kiln::randn({kN}), b = kiln::randn({kN});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b).raw_data());
  set_bytes(state, 3.0 * 4 * kN);
}
void BM_mul(benchmark::State& state) {
  auto a = kiln::randn({kN}), b = kiln::randn({kN});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::mul(a, b).raw_data());
  set_bytes(state, 3.0 * 4 * kN);
}
void BM_relu(benchmark::State& state) {
  auto a = kiln::randn({kN});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::relu(a).raw_data());
  set_bytes(state, 2.0 * 4 * kN);
}
void BM_sum(benchmark::State& state) {
  auto a = kiln::randn({kN});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::sum(a).raw_data());
  set_bytes(state, 1.0 * 4 * kN);
}

}  // namespace

BENCHMARK(BM_copy_loop)->Name("bandwidth/copy_loop")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_add)->Name("bandwidth/kiln_add")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_mul)->Name("bandwidth/kiln_mul")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_relu)->Name("bandwidth/kiln_relu")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_sum)->Name("bandwidth/kiln_sum")->Unit(benchmark::kMillisecond)->UseRealTime();

int main(int argc, char** argv) {
  kiln::bench::initialize(&argc, argv);
  struct Collect : benchmark::ConsoleReporter {
    std::vector<std::pair<std::string, double>> r;
    void ReportRuns(const std::vector<Run>& runs) override {
      ConsoleReporter::ReportRuns(runs);
      for (auto& run : runs)
        if (run.run_type != Run::RT_Aggregate || run.aggregate_name == "median")
          r.push_back({run.benchmark_name(), run.counters.at("GB/s").value});
    }
  } reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  double copy = 0;
  for (auto& [n, v] : reporter.r)
    if (n.rfind("bandwidth/copy_loop", 0) == 0) copy = v;
  std::printf("\n%-28s %10s %10s %8s\n", "op (16M float32)", "kiln GB/s", "copy GB/s", "ratio");
  for (auto& [n, v] : reporter.r)
    if (n.rfind("bandwidth/copy_loop", 0) != 0) std::printf("%-28s %10.2f %10.2f %7.2fx\n", n.c_str(), v, copy, v / copy);
  std::printf("threads: %d; target: at least 0.70x of the copy loop\n", kiln::get_num_threads());
  return 0;
}

// Eager dispatch overhead: `add` on 1-element tensors, with and without
// autograd recording. The peer figure (PyTorch) comes from
// bench/peers/torch_dispatch.py, which must be run separately.
#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {

void BM_add_no_grad(benchmark::State& state) {
  auto a = kiln::ones({1}), b = kiln::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b).raw_data());
  state.counters["ns/op"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_add_recording(benchmark::State& state) {
  auto a = kiln::ones({1}).set_requires_grad(), b = kiln::ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b).raw_data());
  state.counters["ns/op"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace

BENCHMARK(BM_add_no_grad)->Name("dispatch/add_1_element");
BENCHMARK(BM_add_recording)->Name("dispatch/add_1_element_autograd");

int main(int argc, char** argv) {
  kiln::bench::initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  std::printf("\nthe 'ns/op' counter is in seconds per op (Google Benchmark inverts rates); goal: under 1 us without autograd.\n"
              "PyTorch's figure: /usr/bin/python3 bench/peers/torch_dispatch.py\n");
  return 0;
}

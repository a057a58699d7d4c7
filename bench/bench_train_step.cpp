// A training step of W1-W4 (batch 64, 2 threads in CI-like runs) in graph mode
// against eager mode, in the same process: compiled TrainStep vs forward,
// backward and optimizer step op by op. Also compile times and the peak
// arena of W3 inference against eager's allocations.
#include <chrono>

#include "kiln/kiln.h"
#include "ratio_reporter.h"

namespace {
using namespace kiln;

struct Setup {
  std::shared_ptr<nn::Cell> net;
  std::shared_ptr<optim::Optimizer> opt;
  Tensor x, y;
};

Tensor loss_of(const Tensor& out, const Tensor& y) {
  CrossEntropyOptions o;
  o.classes_last = out.dim() == 3;
  return cross_entropy(out, y, o);
}

Setup make(const std::string& w) {
  manual_seed(0);
  Setup s;
  models::ModelConfig c;
  if (w == "w4") {
    c.vocab_size = 77;
    s.net = models::make_model("char_transformer", c);
    s.opt = optim::make_adamw(s.net->trainable_params(), 1e-3, 0.01);
    s.x = randint(0, 77, {64, 128});
    s.y = randint(0, 77, {64, 128});
    return s;
  }
  s.net = models::make_model(w == "w1" ? "mlp" : w == "w2" ? "cnn" : "resnet8", c);
  s.opt = std::make_shared<optim::SGD>(s.net->trainable_params(), optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  s.x = randn({64, 1, 28, 28});
  s.y = randint(0, 10, {64});
  return s;
}

void eager_step(benchmark::State& state, const std::string& w) {
  Setup s = make(w);
  for (auto _ : state) {
    Tensor loss = loss_of(s.net->construct(s.x), s.y);
    s.opt->zero_grad();
    loss.backward();
    s.opt->step();
  }
  state.counters["samples/s"] = benchmark::Counter(64.0 * state.iterations(), benchmark::Counter::kIsRate);
}

void graph_step(benchmark::State& state, const std::string& w) {
  Setup s = make(w);
  jit::TrainStep step(s.net, loss_of, s.opt);
  step(s.x, s.y);  // compile outside the timed loop
  for (auto _ : state) step(s.x, s.y);
  state.counters["samples/s"] = benchmark::Counter(64.0 * state.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace

// Peak bytes allocated while running W3 inference on a batch of 64, eager vs
// the compiled graph (arena included), and the compile time of each workload.
void report_memory_and_compile_times() {
  {
  Setup s = make("w3");
  s.net->set_train(false);
  NoGradGuard no_grad;
  s.net->construct(s.x);  // warm up kernels' own caches
  cpu_allocator_reset_peak();
  int64_t base = cpu_allocator_stats().bytes_in_use;
  s.net->construct(s.x);
  int64_t eager = cpu_allocator_stats().peak_bytes_in_use - base;
  jit::CompileOptions o;
  o.inference = true;
  int64_t before_compile = cpu_allocator_stats().bytes_in_use;
  auto fn = jit::compile(s.net, {s.x}, o);
  cpu_allocator_reset_peak();
  base = before_compile;
  fn.run_borrowed({s.x});
  int64_t graph = cpu_allocator_stats().peak_bytes_in_use - base;
  std::printf("W3 inference, batch 64, peak memory: graph %.2f MB (arena %.2f MB) vs eager %.2f MB: %.2fx less\n",
              graph / 1e6, fn.report().arena_bytes / 1e6, eager / 1e6, static_cast<double>(eager) / graph);
  }
  for (std::string w : {"w1", "w2", "w3", "w4"}) {
    Setup t = make(w);
    jit::TrainStep step(t.net, loss_of, t.opt);
    step(t.x, t.y);
    const auto& r = step.compiled().report();
    std::printf("compile %s training step: %.0f ms (trace %.0f, passes %.0f, prepare %.0f), %zu traced ops -> %zu kernels\n",
                w.c_str(), r.total_ms, r.trace_ms, r.passes_ms, r.prepare_ms, r.traced_nodes, r.kernels);
  }
}

int main(int argc, char** argv) {
  report_memory_and_compile_times();
  for (std::string w : {"w1", "w2", "w3", "w4"}) {
    benchmark::RegisterBenchmark(("train_step/" + w + "/kiln_graph").c_str(), [w](benchmark::State& s) { graph_step(s, w); })
        ->Unit(benchmark::kMillisecond)->MinTime(1.0);
    benchmark::RegisterBenchmark(("train_step/" + w + "/eager").c_str(), [w](benchmark::State& s) { eager_step(s, w); })
        ->Unit(benchmark::kMillisecond)->MinTime(1.0);
  }
  kiln::bench::initialize(&argc, argv);
  kiln::bench::RatioReporter reporter("samples/s");
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_ratios("kiln_graph", "eager");
  return 0;
}

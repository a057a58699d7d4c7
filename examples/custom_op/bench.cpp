// The package's ops against the same computations written with Kiln's
// built-in ops, in one run: eager calls on LLaMA-sized activations.
//   custom_op_bench PACKAGE.so
#include <kiln/kiln.h>
#include <kiln/op_library.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

using namespace kiln;

// The best of five rounds of `reps` calls, in microseconds per call.
double time_us(const std::function<void()>& f, int reps = 50) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    std::chrono::duration<double, std::micro> d = std::chrono::steady_clock::now() - start;
    best = std::min(best, d.count() / reps);
  }
  return best;
}

void report(const char* what, double package_us, double builtin_us) {
  std::printf("%-34s package %8.1f us   built-in ops %8.1f us   ratio %.2f\n", what, package_us, builtin_us,
              package_us / builtin_us);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PACKAGE.so\n", argv[0]);
    return 2;
  }
  load_op_library(argv[1]);
  NoGradGuard no_grad;
  Tensor x = randn({64, 4096}), w = rand({4096}), eps = scalar_tensor(1e-6);
  Tensor gate = randn({64, 11008}), up = randn({64, 11008});
  report("rms_norm [64, 4096]", time_us([&] { call("rms_norm", {x, w}); }),
         time_us([&] { mul(mul(x, rsqrt(add(mean(mul(x, x), {1}, true), eps))), w); }));
  report("swiglu [64, 11008]", time_us([&] { call("swiglu", {gate, up}); }),
         time_us([&] { mul(silu(gate), up); }));
  return 0;
}

// The thread count reaches kernels called from any thread: OpenMP keeps it
// per thread, and oneDNN reads it from the calling thread.
#include <gtest/gtest.h>
#include <omp.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

TEST(Parallel, TheThreadCountHoldsOnThreadsThatRunOps) {
  const int before = get_num_threads();
  for (int n : {1, 3}) {
    set_num_threads(n);
    int seen_by_a_new_thread = 0;
    std::thread([&] {
      Tensor y = ones({4}) + ones({4});  // any op
      EXPECT_EQ(y.to_vector<float>()[0], 2.0f);
      seen_by_a_new_thread = omp_get_max_threads();
    }).join();
    EXPECT_EQ(seen_by_a_new_thread, n);
  }
  set_num_threads(before);
}

// A process that waits gives its cores back: neither OpenMP's workers nor
// OpenBLAS's (a float64 product's) keep spinning for long after their work.
TEST(Parallel, AnIdleProcessLeavesTheCoresFree) {
  const int before = get_num_threads();
  set_num_threads(2);
  Tensor a = randn({256, 256}, DType::Float64), b = randn({256, 256}, DType::Float64);
  Tensor c = matmul(a, b) + matmul(a.to(DType::Float32), b.to(DType::Float32)).to(DType::Float64);
  ASSERT_EQ(c.shape(), Shape({256, 256}));
  const std::clock_t cpu0 = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 40.0) << "threads kept spinning for " << cpu_ms << " ms of CPU while the process slept 200 ms";
  set_num_threads(before);
}

}  // namespace

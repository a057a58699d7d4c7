// The thread count reaches kernels called from any thread: OpenMP keeps it
// per thread, and oneDNN reads it from the calling thread.
#include <gtest/gtest.h>
#include <omp.h>

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

}  // namespace

#pragma once
// Intra-op parallelism. The thread count comes from KILN_NUM_THREADS (default:
// the number of cores) and can be changed with set_num_threads; it also sets
// the threads of the BLAS and oneDNN calls Kiln makes.
#include <cstdint>
#include <functional>

namespace kiln {

int get_num_threads();
void set_num_threads(int n);
// Gives the calling thread's OpenMP regions (and so oneDNN's) the count of
// get_num_threads(). Op dispatch and compiled graphs call it on entry.
void apply_num_threads_to_this_thread();

// Calls fn(begin, end) on disjoint chunks of [0, n); runs inline when n is
// below `grain` or when already inside a parallel region.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace kiln

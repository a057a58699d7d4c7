#include "kiln/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kiln/error.h"
#include "kiln/thread_governor.h"

extern "C" void openblas_set_num_threads(int);
// OpenBLAS's own (pthreads build); weak, so another build of it links too.
extern "C" __attribute__((weak)) void openblas_read_env();
extern "C" __attribute__((weak)) void blas_thread_shutdown_();

namespace kiln {
namespace {

int initial_threads() {
  if (const char* env = std::getenv("KILN_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 1024) return static_cast<int>(n);
    // Read while the library loads, where an exception cannot be caught: warn instead.
    std::fprintf(stderr, "kiln: warning: KILN_NUM_THREADS='%s' is not a whole number from 1 to 1024; using %u threads\n",
                 env, std::max(1u, std::thread::hardware_concurrency()));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// LLVM's OpenMP runtime (libomp, which Kiln runs on where it is installed)
// keeps its idle threads spinning 200 ms after a region, libgomp about 5:
// the same 5 ms here unless the environment says otherwise, so an idle
// process gives its cores back soon and the thread governor's readings of
// the machine's load see its workers asleep. (Read when the runtime starts,
// at the first OpenMP call, which is the one below; libgomp ignores it.)
void default_spin_time() { setenv("KMP_BLOCKTIME", "5", 0); }

// OpenBLAS (used for float64 products only) starts its worker threads as
// it loads, and each spins for 2^28 cycles (about 0.1 s) waiting for a
// first job: a process's first 120 ms ran with a core taken, and OpenMP's
// workers, sharing the other, made a recurrent layer's per-step barriers
// 6x slower, which the thread governor's first measurements took for a
// reason to run on one thread. Its workers are stopped here and restart at
// the next float64 product, spinning 2^20 cycles after each job (unless
// OPENBLAS_THREAD_TIMEOUT says otherwise).
void quiet_blas_workers() {
  if (!openblas_read_env || !blas_thread_shutdown_) return;
  setenv("OPENBLAS_THREAD_TIMEOUT", "20", 0);
  openblas_read_env();
  blas_thread_shutdown_();
}

std::atomic<int>& thread_count() {
  static std::atomic<int> n = [] {
    default_spin_time();
    int t = initial_threads();
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
    quiet_blas_workers();
    return t;
  }();
  return n;
}

thread_local int t_thread_limit = 0;  // 0: no ThreadLimit on this thread

}  // namespace

int get_num_threads() {
  const int n = thread_count().load(std::memory_order_relaxed);
  return t_thread_limit > 0 ? std::min(n, t_thread_limit) : n;
}

ThreadLimit::ThreadLimit(int threads) : previous_(t_thread_limit) {
  KILN_CHECK(threads >= 1, "ThreadLimit(", threads, "): the thread count must be at least 1");
  t_thread_limit = previous_ > 0 ? std::min(previous_, threads) : threads;
  apply_num_threads_to_this_thread();
}

ThreadLimit::~ThreadLimit() {
  t_thread_limit = previous_;
  apply_num_threads_to_this_thread();
}

void set_num_threads(int n) {
  KILN_CHECK(n >= 1, "set_num_threads(", n, "): the thread count must be at least 1");
  thread_count() = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

// omp_set_num_threads sets the calling thread's count only; other threads
// start with OpenMP's default (every core), which oneDNN then uses.
void apply_num_threads_to_this_thread() {
  thread_local int applied = 0;
  int n = get_num_threads();
  if (applied != n) {
    omp_set_num_threads(n);
    applied = n;
  }
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int threads = get_num_threads();
  if (threads == 1 || n <= grain || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num();
    int64_t nt = omp_get_num_threads();
    int64_t begin = n * t / nt;
    int64_t end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace kiln

namespace kiln {
namespace {
// Apply KILN_NUM_THREADS when the library loads, before any BLAS or oneDNN call.
const int kThreadsAtLoad = get_num_threads();
}  // namespace
}  // namespace kiln

// All-reduce bus bandwidth of Kiln's process group against Gloo's own
// allreduce called directly, on the same buffers, in the same processes:
// two ranks (forked, loopback TCP) alternate them, size by size, and rank
// 0 prints the medians and their ratios. Kiln's group runs twice: as it
// comes (shared memory, the ranks being on one host) and with
// KILN_DIST_SHARED_MEMORY=0 (Gloo's TCP underneath, as across hosts). Bus bandwidth is the algorithm's
// 2 (n - 1) / n times the buffer over the time, as NCCL's tests report it.
//
//   bench_allreduce [ranks=2] [rounds=7]
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "kiln/dist.h"
#include "kiln/kiln.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_rank(int rank, int ranks, int port, int rounds, const std::string& store_dir) {
  dist::InitOptions o;
  o.place.rank = rank;
  o.place.world_size = ranks;
  o.place.master_addr = "127.0.0.1";
  o.place.master_port = port;
  auto group = dist::init(o);
  setenv("KILN_DIST_SHARED_MEMORY", "0", 1);  // read when a group is made
  std::vector<int> everyone(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) everyone[static_cast<size_t>(r)] = r;
  auto over_tcp = group->new_group(everyone);
  // Gloo on its own: a file store and a device of its own, the same transport.
  gloo::rendezvous::FileStore store(store_dir);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  auto device = gloo::transport::tcp::CreateDevice(attr);
  context->connectFullMesh(store, device);
  uint32_t tag = 1u << 20;  // apart from Kiln's
  if (rank == 0 && !group->shared_memory()) std::printf("(the ranks could not share memory: both Kiln columns are TCP)\n");
  if (rank == 0)
    std::printf("%-9s %18s %13s %13s %11s %11s\n", "size", "kiln shm GB/s", "kiln tcp", "gloo", "shm/gloo",
                "tcp/gloo");
  for (int64_t mib : {1, 4, 16, 64}) {
    const int64_t n = mib * (1 << 20) / 4;
    Tensor t = ones({n});
    const int iterations = static_cast<int>(std::max<int64_t>(3, 64 / mib));
    std::vector<double> shm_s, tcp_s, gloo_s;
    auto time_group = [&](dist::ProcessGroup& g, std::vector<double>& seconds) {
      g.barrier();
      const auto start = Clock::now();
      for (int i = 0; i < iterations; ++i) g.all_reduce(t);
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count() / iterations);
    };
    for (int round = 0; round < rounds; ++round) {
      time_group(*group, shm_s);
      time_group(*over_tcp, tcp_s);
      group->barrier();
      const auto start = Clock::now();
      for (int i = 0; i < iterations; ++i) {
        gloo::AllreduceOptions opts(context);
        opts.setOutput(t.data<float>(), static_cast<size_t>(n));
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        opts.setTag(tag++);
        gloo::allreduce(opts);
      }
      gloo_s.push_back(std::chrono::duration<double>(Clock::now() - start).count() / iterations);
    }
    const double bus = 2.0 * (ranks - 1) / ranks * static_cast<double>(n) * 4 / 1e9;
    const double shm_bw = bus / median(shm_s), tcp_bw = bus / median(tcp_s), gloo_bw = bus / median(gloo_s);
    if (rank == 0)
      std::printf("%4lld MiB  %18.2f %13.2f %13.2f %10.2fx %10.2fx\n", static_cast<long long>(mib), shm_bw, tcp_bw,
                  gloo_bw, shm_bw / gloo_bw, tcp_bw / gloo_bw);

  }
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  const std::string store_dir = "/tmp/kiln_bench_allreduce_" + std::to_string(getpid());
  std::filesystem::create_directories(store_dir);
  const int port = 20000 + getpid() % 20000;
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        set_num_threads(1);
        run_rank(r, ranks, port, rounds, store_dir);
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::filesystem::remove_all(store_dir);
  return failed ? 1 : 0;
}

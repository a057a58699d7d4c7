#pragma once
// All-reduce through shared memory, for a group whose ranks all run on one
// host. Gloo has no shared-memory transport: over loopback TCP each ring
// step is a socket copy and two thread wake-ups, so 1 MiB took about 2 ms
// while the copies themselves take a tenth of that; and under data
// parallelism those wake-ups contend with backward for the same cores.
//
// Each rank owns a slot of the segment. A round copies every rank's chunk
// into its slot, rank k reduces part k of all the slots (in rank order, so
// every rank gets the same bits), and every rank copies the reduced parts
// out. Ranks wait on each other with a short spin, then a futex, with the
// group's timeout; a peer whose process is gone is noticed at once.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dist::detail {

class StoreClient;

class SharedMemoryReduce {
 public:
  using ReduceFn = void (*)(void*, const void*, const void*, size_t);

  // Collective over the group's ranks, through the rendezvous store under
  // `prefix`: a segment when every rank runs on this host (the same kernel
  // and the same network, IPC, mount and PID namespaces), maps it and none
  // has KILN_DIST_SHARED_MEMORY=0; otherwise nullptr on every rank alike.
  // `world_ranks` name the group's ranks in messages.
  static std::unique_ptr<SharedMemoryReduce> join(StoreClient& store, const std::string& prefix, int rank, int size,
                                                  std::vector<int> world_ranks, std::chrono::milliseconds timeout);
  ~SharedMemoryReduce();
  SharedMemoryReduce(const SharedMemoryReduce&) = delete;
  SharedMemoryReduce& operator=(const SharedMemoryReduce&) = delete;

  // Reduces `count` elements of `element_size` bytes in place with `fn`
  // (out = a op b). Throws std::runtime_error naming the rank waited for
  // when one does not come within `timeout` or its process is gone.
  void all_reduce(void* data, size_t count, size_t element_size, ReduceFn fn, std::chrono::milliseconds timeout);

 private:
  struct Control;
  SharedMemoryReduce(void* base, size_t bytes, int rank, int size, std::vector<int> world_ranks);
  Control& control(int r) const;
  char* slot(int r) const;
  // Waits until rank r's counter `which` reaches `round`.
  void wait_for(int r, int which, uint32_t round, std::chrono::steady_clock::time_point deadline) const;
  void publish(int which, uint32_t round);

  void* base_;
  size_t bytes_;
  int rank_, size_;
  std::vector<int> world_ranks_;
  uint32_t round_ = 0;
};

}  // namespace kiln::dist::detail

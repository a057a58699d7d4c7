// The shared-memory all-reduce of ranks on one host.
#include "distributed/shared_memory.h"

#include <fcntl.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "distributed/tcp_store.h"

namespace kiln::dist::detail {

namespace {

constexpr size_t kSlotBytes = size_t{4} << 20;  // a round's chunk per rank
constexpr size_t kHeaderBytes = 4096;           // the header and the ranks' counters
constexpr uint64_t kMagic = 0x316d68736e6c696bULL;  // "kilnshm1"
constexpr auto kSpin = std::chrono::microseconds(30);  // before sleeping on the futex
constexpr auto kCheckPeerEvery = std::chrono::milliseconds(100);

enum Counter { kArrived, kReduced, kDone, kCounters };

std::string link_of(const char* path) {
  char target[128] = {};
  const ssize_t n = readlink(path, target, sizeof target - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string("?");
}

// Ranks that agree on this share /dev/shm, can see each other's processes,
// and are not meant to be told apart as hosts (multi-host tests give each
// host its own network namespace).
std::string host_identity() {
  const std::string pid = std::to_string(getpid());
  if (const char* v = std::getenv("KILN_DIST_SHARED_MEMORY"); v && std::string(v) == "0") return "off " + pid;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(file, boot);
  if (boot.empty()) return "unknown " + pid;
  return boot + " " + link_of("/proc/self/ns/net") + " " + link_of("/proc/self/ns/ipc") + " " +
         link_of("/proc/self/ns/mnt") + " " + link_of("/proc/self/ns/pid");
}

// A process that exited is gone even while its parent has not reaped it
// (a zombie still answers kill(pid, 0)).
bool process_alive(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: kill's answer stands
  const size_t close = line.rfind(')');    // the command name may hold spaces and parentheses
  return close == std::string::npos || close + 2 >= line.size() || (line[close + 2] != 'Z' && line[close + 2] != 'X');
}

std::vector<char> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string text_of(const std::vector<char>& v) { return {v.begin(), v.end()}; }

long futex(std::atomic<uint32_t>& word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), op, value, timeout, nullptr, 0);
}

// Rank r's part of n elements: equal runs of whole cache lines.
std::pair<size_t, size_t> part_of(int r, int size, size_t n, size_t element_size) {
  const size_t unit = std::max<size_t>(1, 64 / element_size);
  const size_t units = (n + unit - 1) / unit;
  const size_t lo = std::min(n, units * static_cast<size_t>(r) / static_cast<size_t>(size) * unit);
  const size_t hi = std::min(n, units * static_cast<size_t>(r + 1) / static_cast<size_t>(size) * unit);
  return {lo, hi};
}

}  // namespace

struct Header {
  uint64_t magic;
  int32_t ranks;
  uint64_t slot_bytes;
};

struct alignas(64) SharedMemoryReduce::Control {
  std::atomic<uint32_t> counter[kCounters];  // the last round this rank finished each phase of
  int32_t pid;
  uint64_t count, element_size;  // of the all-reduce this rank is in, set before it arrives
};

static_assert(sizeof(Header) <= 64, "the header takes the first cache line");

std::unique_ptr<SharedMemoryReduce> SharedMemoryReduce::join(StoreClient& store, const std::string& prefix, int rank,
                                                             int size, std::vector<int> world_ranks,
                                                             std::chrono::milliseconds timeout) {
  if (size < 2) return nullptr;
  // Every rank reads every rank's identity, so they all decide alike.
  const std::string me = host_identity();
  store.set(prefix + "/host/" + std::to_string(rank), bytes_of(me));
  for (int r = 0; r < size; ++r)
    if (text_of(store.get(prefix + "/host/" + std::to_string(r), timeout)) != me) return nullptr;

  const size_t bytes = kHeaderBytes + kSlotBytes * static_cast<size_t>(size);
  void* base = MAP_FAILED;
  std::string name;
  if (rank == 0) {
    static std::atomic<int> made{0};
    name = "/kiln-" + std::to_string(getpid()) + "-" + std::to_string(++made);
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate reserves the pages now: a full /dev/shm is a refusal
    // here, not a SIGBUS in the middle of a collective.
    if (fd >= 0 && posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0)
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (base != MAP_FAILED) {
      auto* header = static_cast<Header*>(base);
      header->ranks = size;
      header->slot_bytes = kSlotBytes;
      std::atomic_thread_fence(std::memory_order_release);
      header->magic = kMagic;
    } else {
      if (fd >= 0) shm_unlink(name.c_str());
      name.clear();
    }
    store.set(prefix + "/segment", bytes_of(name));
  } else {
    name = text_of(store.get(prefix + "/segment", timeout));
    const int fd = name.empty() ? -1 : shm_open(name.c_str(), O_RDWR, 0);
    if (fd >= 0) {
      base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    }
    if (base != MAP_FAILED) {
      const auto* header = static_cast<const Header*>(base);
      if (header->magic != kMagic || header->ranks != size || header->slot_bytes != kSlotBytes) {
        munmap(base, bytes);
        base = MAP_FAILED;
      }
    }
  }
  store.set(prefix + "/mapped/" + std::to_string(rank), bytes_of(base != MAP_FAILED ? "1" : "0"));
  bool everyone = true;
  for (int r = 0; r < size; ++r) everyone &= text_of(store.get(prefix + "/mapped/" + std::to_string(r), timeout)) == "1";
  // Everyone who could map it has: the name can go, and the segment goes
  // with the last process that has it mapped, however the job ends.
  if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (!everyone) {
    if (base != MAP_FAILED) munmap(base, bytes);
    return nullptr;
  }
  std::unique_ptr<SharedMemoryReduce> reduce(new SharedMemoryReduce(base, bytes, rank, size, std::move(world_ranks)));
  reduce->control(rank).pid = getpid();
  // Nobody reads a peer's pid before the first round, which comes after
  // the group's first Gloo exchange or this store round trip.
  store.set(prefix + "/ready/" + std::to_string(rank), bytes_of("1"));
  for (int r = 0; r < size; ++r) store.get(prefix + "/ready/" + std::to_string(r), timeout);
  return reduce;
}

SharedMemoryReduce::SharedMemoryReduce(void* base, size_t bytes, int rank, int size, std::vector<int> world_ranks)
    : base_(base), bytes_(bytes), rank_(rank), size_(size), world_ranks_(std::move(world_ranks)) {}

SharedMemoryReduce::~SharedMemoryReduce() { munmap(base_, bytes_); }

SharedMemoryReduce::Control& SharedMemoryReduce::control(int r) const {
  return reinterpret_cast<Control*>(static_cast<char*>(base_) + 64)[r];
}

char* SharedMemoryReduce::slot(int r) const {
  return static_cast<char*>(base_) + kHeaderBytes + kSlotBytes * static_cast<size_t>(r);
}

void SharedMemoryReduce::publish(int which, uint32_t round) {
  std::atomic<uint32_t>& word = control(rank_).counter[which];
  word.store(round, std::memory_order_release);
  futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

void SharedMemoryReduce::wait_for(int r, int which, uint32_t round, std::chrono::steady_clock::time_point deadline) const {
  std::atomic<uint32_t>& word = control(r).counter[which];
  auto reached = [&](uint32_t seen) { return static_cast<int32_t>(seen - round) >= 0; };
  const auto spin_until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (reached(word.load(std::memory_order_acquire))) return;
    _mm_pause();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
  }
  const int world_rank = world_ranks_[static_cast<size_t>(r)];
  for (;;) {
    const uint32_t seen = word.load(std::memory_order_acquire);
    if (reached(seen)) return;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw std::runtime_error("rank " + std::to_string(world_rank) + " did not take its part in the shared-memory "
                               "all-reduce in time");
    const auto nap = std::min<std::chrono::nanoseconds>(deadline - now, kCheckPeerEvery);
    const timespec ts{static_cast<time_t>(nap.count() / 1000000000), static_cast<long>(nap.count() % 1000000000)};
    futex(word, FUTEX_WAIT, seen, &ts);
    if (!process_alive(control(r).pid))
      throw std::runtime_error("the process of rank " + std::to_string(world_rank) + " (pid " +
                               std::to_string(control(r).pid) + ") is gone");
  }
}

void SharedMemoryReduce::all_reduce(void* data, size_t count, size_t element_size, ReduceFn fn,
                                    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t per_round = kSlotBytes / element_size;
  char* out = static_cast<char*>(data);
  for (size_t first = 0; first < count; first += per_round) {
    const size_t n = std::min(per_round, count - first);
    char* chunk = out + first * element_size;
    const uint32_t round = ++round_;
    // This rank's slot is free once every rank copied the last round out.
    for (int r = 0; r < size_; ++r)
      if (r != rank_) wait_for(r, kDone, round - 1, deadline);
    std::memcpy(slot(rank_), chunk, n * element_size);
    control(rank_).count = count;
    control(rank_).element_size = element_size;
    publish(kArrived, round);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      wait_for(r, kArrived, round, deadline);
      // Gloo refuses a message of the wrong size; here the parts would not line up.
      if (control(r).count != count || control(r).element_size != element_size)
        throw std::runtime_error("this rank reduces " + std::to_string(count) + " elements of " +
                                 std::to_string(element_size) + " bytes but rank " +
                                 std::to_string(world_ranks_[static_cast<size_t>(r)]) + " " +
                                 std::to_string(control(r).count) + " of " + std::to_string(control(r).element_size) +
                                 "; every rank must all-reduce tensors of the same size and dtype, in the same order");
    }
    // Part k is reduced by rank k alone, into its own slot: every rank
    // reads the same result.
    const auto [lo, hi] = part_of(rank_, size_, n, element_size);
    char* mine = slot(rank_) + lo * element_size;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && hi > lo) fn(mine, mine, slot(r) + lo * element_size, hi - lo);
    publish(kReduced, round);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) wait_for(r, kReduced, round, deadline);
      const auto [from, to] = part_of(r, size_, n, element_size);
      std::memcpy(chunk + from * element_size, slot(r) + from * element_size, (to - from) * element_size);
    }
    publish(kDone, round);
  }
}

}  // namespace kiln::dist::detail

// The device caching allocator over a made-up device of limited memory:
// steady-state loops reach the device's allocator only at first, blocks
// stay with the stream they were allocated on, an allocation that does not
// fit gives the cache back (after the device's work) and tries again, and
// one that still does not fit says what it asked and what is held.
#include "core/stream_ordered_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <unordered_map>

#include "kiln/error.h"

namespace {
using namespace kiln;

struct FakeDevice {
  explicit FakeDevice(size_t bytes) : capacity(bytes) {}
  size_t capacity;
  size_t used = 0;
  int allocations = 0, frees = 0, synchronizations = 0;
  void* stream = nullptr;  // the calling thread's
  std::unordered_map<void*, size_t> blocks;

  DeviceMemoryCalls calls() {
    DeviceMemoryCalls c;
    c.device = "fake:0";
    c.allocate = [this](size_t n) -> void* {
      if (used + n > capacity) return nullptr;
      void* p = std::malloc(n);
      blocks[p] = n;
      used += n;
      ++allocations;
      return p;
    };
    c.free = [this](void* p) {
      used -= blocks.at(p);
      blocks.erase(p);
      std::free(p);
      ++frees;
    };
    c.synchronize = [this] { ++synchronizations; };
    c.current_stream = [this] { return stream; };
    c.free_and_total = [this] { return std::pair<size_t, size_t>{capacity - used, capacity}; };
    return c;
  }
};

constexpr size_t kMiB = size_t{1} << 20;
void* const kStreamA = reinterpret_cast<void*>(0xA);
void* const kStreamB = reinterpret_cast<void*>(0xB);

TEST(StreamOrderedAllocator, SizeClassesWasteLittle) {
  EXPECT_EQ(StreamOrderedAllocator::round_size(0), 512u);
  EXPECT_EQ(StreamOrderedAllocator::round_size(513), 1024u);
  EXPECT_EQ(StreamOrderedAllocator::round_size(kMiB), kMiB);
  EXPECT_EQ(StreamOrderedAllocator::round_size(kMiB + 1), kMiB + kMiB / 4);
  EXPECT_EQ(StreamOrderedAllocator::round_size(3 * kMiB), 3 * kMiB);
  for (size_t n : {kMiB + 1, 5 * kMiB + 7, 1000 * kMiB + 3})
    EXPECT_LE(StreamOrderedAllocator::round_size(n), n + n / 4) << n;
}

TEST(StreamOrderedAllocator, ASteadyLoopStopsReachingTheDevice) {
  FakeDevice d(64 * kMiB);
  StreamOrderedAllocator a(d.calls());
  for (int step = 0; step < 10; ++step) {
    void* x = a.allocate(3 * kMiB);
    void* y = a.allocate(1000);
    a.deallocate(y, 1000);
    a.deallocate(x, 3 * kMiB);
  }
  const AllocatorStats s = a.stats();
  EXPECT_EQ(d.allocations, 2);
  EXPECT_EQ(s.system_allocations, 2);
  EXPECT_EQ(s.reuses, 18);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.bytes_cached, static_cast<int64_t>(3 * kMiB + 1024));
  EXPECT_EQ(s.peak_bytes_in_use, static_cast<int64_t>(3 * kMiB + 1024));
  a.release_cache();
  EXPECT_EQ(d.synchronizations, 1) << "queued work may still read cached blocks";
  EXPECT_EQ(d.used, 0u);
  EXPECT_EQ(a.stats().bytes_cached, 0);
}

// A block freed on stream A serves A's next request (A's work runs in
// order) but not B's, which might run while A's last use of it is queued.
TEST(StreamOrderedAllocator, BlocksStayWithTheirStream) {
  FakeDevice d(64 * kMiB);
  StreamOrderedAllocator a(d.calls());
  void* x = a.allocate_on({{}, kStreamA}, kMiB);
  a.deallocate_on({{}, kStreamA}, x, kMiB);
  void* on_b = a.allocate_on({{}, kStreamB}, kMiB);
  EXPECT_NE(on_b, x);
  void* on_a = a.allocate_on({{}, kStreamA}, kMiB);
  EXPECT_EQ(on_a, x);
  // Freed by a thread whose current stream is B, it still goes back to A.
  d.stream = kStreamB;
  a.deallocate(on_a, kMiB);
  EXPECT_NE(a.allocate(kMiB), x);
  d.stream = kStreamA;
  EXPECT_EQ(a.allocate(kMiB), x);
  EXPECT_EQ(d.allocations, 3);
}

TEST(StreamOrderedAllocator, TheCacheIsGivenBackBeforeMemoryRunsOut) {
  FakeDevice d(10 * kMiB);
  StreamOrderedAllocator a(d.calls());
  void* held = a.allocate(4 * kMiB);
  void* cached = a.allocate(4 * kMiB);
  a.deallocate(cached, 4 * kMiB);
  void* big = a.allocate(5 * kMiB);  // fits once the cached 4 MiB are given back
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(d.synchronizations, 1);
  EXPECT_EQ(a.stats().bytes_cached, 0);
  EXPECT_EQ(a.stats().bytes_in_use, static_cast<int64_t>(9 * kMiB));
  a.deallocate(big, 5 * kMiB);
  a.deallocate(held, 4 * kMiB);
}

TEST(StreamOrderedAllocator, OutOfMemorySaysWhatWasAskedAndWhatIsHeld) {
  FakeDevice d(10 * kMiB);
  StreamOrderedAllocator a(d.calls());
  void* held = a.allocate(6 * kMiB);
  try {
    a.allocate(5 * kMiB + 1);
    FAIL() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory on fake:0"), std::string::npos) << m;
    EXPECT_NE(m.find("a request of 5.0 MiB (6.0 MiB as allocated)"), std::string::npos) << m;
    EXPECT_NE(m.find("tensors hold 6.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("4.0 MiB free of 10.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("smaller batch size"), std::string::npos) << m;
  }
  // Nothing was lost: what was held still is, and the memory is usable.
  EXPECT_EQ(a.stats().bytes_in_use, static_cast<int64_t>(6 * kMiB));
  void* small = a.allocate(kMiB);
  a.deallocate(small, kMiB);
  a.deallocate(held, 6 * kMiB);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
}

TEST(StreamOrderedAllocator, FreeingUnknownMemoryIsAnError) {
  FakeDevice d(kMiB);
  StreamOrderedAllocator a(d.calls());
  int local = 0;
  EXPECT_THROW(a.deallocate(&local, sizeof local), Error);
  void* p = a.allocate(100);
  a.deallocate(p, 100);
  EXPECT_THROW(a.deallocate(p, 100), Error) << "a second free";
}

}  // namespace

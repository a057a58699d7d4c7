#include "core/stream_ordered_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "kiln/error.h"

namespace kiln {
namespace {

std::string bytes_str(size_t n) {
  char s[32];
  if (n >= (size_t{1} << 30))
    std::snprintf(s, sizeof s, "%.2f GiB", static_cast<double>(n) / static_cast<double>(size_t{1} << 30));
  else if (n >= (size_t{1} << 20))
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(n) / static_cast<double>(size_t{1} << 20));
  else
    std::snprintf(s, sizeof s, "%zu bytes", n);
  return s;
}

}  // namespace

StreamOrderedAllocator::StreamOrderedAllocator(DeviceMemoryCalls calls) : calls_(std::move(calls)) {
  KILN_CHECK(calls_.allocate && calls_.free && calls_.synchronize,
             "StreamOrderedAllocator: the device's allocate, free and synchronize calls are required");
}

size_t StreamOrderedAllocator::round_size(size_t nbytes) {
  const size_t n = std::max<size_t>(nbytes, 1);
  if (n < (size_t{1} << 20)) return (n + 511) / 512 * 512;
  const size_t step = std::bit_floor(n) / 4;
  return (n + step - 1) / step * step;
}

void* StreamOrderedAllocator::allocate(size_t nbytes) {
  return allocate_on(Stream{{}, calls_.current_stream ? calls_.current_stream() : nullptr}, nbytes);
}

void StreamOrderedAllocator::deallocate(void* ptr, size_t nbytes) { deallocate_on(Stream{}, ptr, nbytes); }

void* StreamOrderedAllocator::allocate_on(const Stream& stream, size_t nbytes) {
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* p = allocate_locked(stream.handle, size);
  if (!p) out_of_memory(nbytes, size);
  return p;
}

void* StreamOrderedAllocator::allocate_locked(void* stream, size_t size) {
  void* p = nullptr;
  auto& blocks = cache_[stream][size];
  if (!blocks.empty()) {
    p = blocks.back();
    blocks.pop_back();
    stats_.bytes_cached -= static_cast<int64_t>(size);
    stats_.reuses++;
  } else {
    p = calls_.allocate(size);
    if (!p && stats_.bytes_cached > 0) {  // the cache's blocks may be what is missing: give them back, and again
      release_cache_locked();
      p = calls_.allocate(size);
    }
    if (!p) return nullptr;
    stats_.system_allocations++;
  }
  held_[p] = {size, stream};
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return p;
}

// The block goes back to the stream it was allocated on, not the caller's:
// only that stream's later work is sure to come after its last use.
void StreamOrderedAllocator::deallocate_on(const Stream&, void* ptr, size_t) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(ptr);
  KILN_CHECK(it != held_.end(), "StreamOrderedAllocator on ", calls_.device,
             ": freeing memory it did not hand out (or freeing it twice)");
  const Held h = it->second;
  held_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(h.size);
  stats_.bytes_cached += static_cast<int64_t>(h.size);
  cache_[h.stream][h.size].push_back(ptr);
}

void StreamOrderedAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_cache_locked();
}

// Queued work may still use a cached block (freed in stream order before its
// kernels ran): the device finishes it first.
void StreamOrderedAllocator::release_cache_locked() {
  if (stats_.bytes_cached == 0) return;
  calls_.synchronize();
  for (auto& [stream, sizes] : cache_)
    for (auto& [size, blocks] : sizes)
      for (void* p : blocks) calls_.free(p);
  cache_.clear();
  stats_.bytes_cached = 0;
}

AllocatorStats StreamOrderedAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void StreamOrderedAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void StreamOrderedAllocator::out_of_memory(size_t nbytes, size_t size) {
  std::string device;
  if (calls_.free_and_total) {
    const auto [free, total] = calls_.free_and_total();
    device = "; the device has " + bytes_str(free) + " free of " + bytes_str(total) + " (other processes' use counted)";
  }
  KILN_FAIL("out of memory on ", calls_.device, ": a request of ", bytes_str(nbytes),
            size != nbytes ? " (" + bytes_str(size) + " as allocated)" : std::string(),
            " could not be met with the cache given back; tensors hold ",
            bytes_str(static_cast<size_t>(stats_.bytes_in_use)), device,
            ". Use a smaller batch size, train in half precision (precision: bfloat16), compile the step (mode: "
            "graph plans its memory in one arena), or free the tensors you no longer need");
}

}  // namespace kiln

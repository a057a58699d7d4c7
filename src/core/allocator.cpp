#include "kiln/allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/error.h"

namespace kiln {
namespace {

constexpr size_t kAlignment = 64;
// Freed blocks above this total are returned to the system instead of cached.
constexpr int64_t kMaxCachedBytes = int64_t{2} << 30;

size_t round_size(size_t n) {
  if (n <= 4096) return (n + kAlignment - 1) / kAlignment * kAlignment;
  return (n + 4095) / 4096 * 4096;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t size = round_size(std::max<size_t>(nbytes, 1));
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(size);
      if (it != cache_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= static_cast<int64_t>(size);
        stats_.reuses++;
        note_in_use(size);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, size);
    if (p == nullptr) {
      release_cache();
      p = std::aligned_alloc(kAlignment, size);
    }
    KILN_CHECK(p != nullptr, "out of memory: could not allocate ", size,
               " bytes on the CPU; use smaller batches or free tensors you no longer need");
    std::lock_guard<std::mutex> lock(mu_);
    stats_.system_allocations++;
    note_in_use(size);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    size_t size = round_size(std::max<size_t>(nbytes, 1));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
    if (stats_.bytes_cached + static_cast<int64_t>(size) > kMaxCachedBytes) {
      std::free(ptr);
      return;
    }
    cache_[size].push_back(ptr);
    stats_.bytes_cached += static_cast<int64_t>(size);
  }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : cache_)
      for (void* p : blocks) std::free(p);
    cache_.clear();
    stats_.bytes_cached = 0;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

 private:
  void note_in_use(size_t size) {
    stats_.bytes_in_use += static_cast<int64_t>(size);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> cache_;
  AllocatorStats stats_;
};

CpuAllocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static auto* a = new CpuAllocator();
  return *a;
}

}  // namespace

Allocator& host_allocator() { return cpu_allocator(); }

AllocatorStats cpu_allocator_stats() { return cpu_allocator().stats(); }
AllocatorStats allocator_stats(Device device) { return get_allocator(device)->stats(); }
void cpu_allocator_release_cache() { cpu_allocator().release_cache(); }
void cpu_allocator_reset_peak() { cpu_allocator().reset_peak(); }

}  // namespace kiln

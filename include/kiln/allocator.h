#pragma once
// Device memory allocation. The CPU allocator hands out 64-byte aligned blocks
// and keeps freed blocks in size classes for reuse, so steady-state training
// loops stop calling the system allocator.
#include <cstddef>
#include <cstdint>

#include "kiln/device.h"
#include "kiln/stream.h"

namespace kiln {

struct AllocatorStats {
  int64_t bytes_in_use = 0;     // handed out and not yet returned
  int64_t bytes_cached = 0;     // returned and kept for reuse
  int64_t peak_bytes_in_use = 0;
  int64_t system_allocations = 0;  // calls that reached the system allocator
  int64_t reuses = 0;              // requests served from the cache
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Stream-ordered: a block freed on a stream may serve that stream's next
  // request at once, since its work runs in order; another stream waits for
  // the block's last use first. The host's work runs as issued, so here the
  // stream changes nothing.
  virtual void* allocate_on(const Stream&, size_t nbytes) { return allocate(nbytes); }
  virtual void deallocate_on(const Stream&, void* ptr, size_t nbytes) { deallocate(ptr, nbytes); }
  virtual AllocatorStats stats() const { return {}; }
};

// The allocator of a device's backend (kiln/backend.h).
Allocator* get_allocator(Device device);
// The host's caching allocator: the CPU backend's, and any other backend's
// that keeps its tensors in host memory.
Allocator& host_allocator();

// A device's allocator statistics (the CPU's: cpu_allocator_stats()).
AllocatorStats allocator_stats(Device device);
AllocatorStats cpu_allocator_stats();
// Returns cached blocks to the system.
void cpu_allocator_release_cache();
// Starts peak_bytes_in_use over from the bytes in use now (to measure one phase).
void cpu_allocator_reset_peak();

}  // namespace kiln

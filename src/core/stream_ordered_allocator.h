#pragma once
// The caching allocator of a device whose memory the host does not manage
// (a GPU's), over the device's raw calls: steady-state loops stop reaching
// them, a block freed on a stream is reused by that stream's later work at
// once (its earlier work runs first, in order), and an out-of-memory error
// says what was asked, what is held, and what to change.
//
// A block returns to the stream it was allocated on, whichever thread frees
// it: a tensor used on another stream too must be kept alive until that
// stream's work is done (its backend's event), as with any stream-ordered
// allocator. Blocks are not split: sizes are rounded to classes (512 bytes
// below 1 MiB, quarters of a power of two above), wasting at most a
// quarter of a large request.
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/allocator.h"

namespace kiln {

// What the allocator asks of the device.
struct DeviceMemoryCalls {
  std::string device;                     // its name in messages, such as "cuda:0"
  std::function<void*(size_t)> allocate;  // raw memory, or null when the device has no room
  std::function<void(void*)> free;        // gives raw memory back
  std::function<void()> synchronize;      // waits for all the device's queued work
  std::function<void*()> current_stream;  // the calling thread's stream handle (null: the default one)
  std::function<std::pair<size_t, size_t>()> free_and_total;  // bytes free and in all, or empty
};

class StreamOrderedAllocator final : public Allocator {
 public:
  explicit StreamOrderedAllocator(DeviceMemoryCalls calls);
  // Cached blocks are not given back here: a backend keeps its allocator
  // for the life of the process, and the device may be gone at its end.
  ~StreamOrderedAllocator() override = default;

  void* allocate(size_t nbytes) override;  // on the calling thread's current stream
  void deallocate(void* ptr, size_t nbytes) override;
  void* allocate_on(const Stream& stream, size_t nbytes) override;
  void deallocate_on(const Stream& stream, void* ptr, size_t nbytes) override;
  AllocatorStats stats() const override;

  // Waits for the device's work, then gives every cached block back to it.
  void release_cache();
  void reset_peak();
  // The size class a request is served from.
  static size_t round_size(size_t nbytes);

 private:
  void* allocate_locked(void* stream, size_t size);
  void release_cache_locked();
  [[noreturn]] void out_of_memory(size_t nbytes, size_t size);

  DeviceMemoryCalls calls_;
  mutable std::mutex mu_;
  // Free blocks by the stream they belong to, then by size class.
  std::unordered_map<void*, std::unordered_map<size_t, std::vector<void*>>> cache_;
  struct Held {
    size_t size;
    void* stream;
  };
  std::unordered_map<void*, Held> held_;  // blocks handed out
  AllocatorStats stats_;
};

}  // namespace kiln

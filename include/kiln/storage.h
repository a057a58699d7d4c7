#pragma once
// A reference-counted block of device memory shared by a tensor and its views.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "kiln/device.h"

namespace kiln {

class Allocator;

struct StorageImpl {
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;
  // Moves the bytes to `device`: every tensor and view on this storage then
  // lives there (Cell::to moves parameters this way). Bumps the version.
  void move_to(Device device);

  void* data = nullptr;
  size_t nbytes = 0;
  Device device;
  Allocator* allocator = nullptr;
  // Bumped by every in-place write, so autograd can tell that a tensor it
  // saved for backward was changed afterwards.
  std::atomic<uint32_t> version{0};
};

using Storage = std::shared_ptr<StorageImpl>;

// Memory owned by someone else (a NumPy array, a DLPack producer) as a
// storage, with no copy: `release` runs once the last tensor on it is gone
// (or when move_to copies the bytes elsewhere) instead of a deallocation.
Storage external_storage(void* data, size_t nbytes, Device device, std::function<void()> release);

}  // namespace kiln

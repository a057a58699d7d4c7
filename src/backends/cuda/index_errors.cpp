// The devices' slots for out-of-range indices: mapped page-locked memory,
// one small record per device, read by the host after it waited.
#include "backends/cuda/index_errors.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

#include "backends/cuda/on_device.h"

namespace kiln::cuda {
namespace {

constexpr int kMaxDevices = 64;

struct Slot {
  std::atomic<IndexError*> host{nullptr};
  IndexError* device = nullptr;
};
std::array<Slot, kMaxDevices> g_slots;
std::mutex g_making;

std::string describe(const IndexError& e) {
  const std::string at = " at position " + std::to_string(e.position);
  const std::string range = " (valid: " + std::to_string(-e.size) + ".." + std::to_string(e.size - 1) + ")";
  switch (static_cast<IndexKind>(e.kind)) {
    case IndexKind::Embedding:
      return "embedding index " + std::to_string(e.index) + at + " is out of range for a table of " +
             std::to_string(e.size) + " rows" + range;
    case IndexKind::Gather:
    case IndexKind::IndexSelect:
    case IndexKind::Scatter: {
      const char* op = e.kind == static_cast<int32_t>(IndexKind::Gather)        ? "gather"
                       : e.kind == static_cast<int32_t>(IndexKind::IndexSelect) ? "index_select"
                                                                                : "scatter";
      return std::string(op) + " index " + std::to_string(e.index) + at + " is out of range for an axis of size " +
             std::to_string(e.size) + range;
    }
    case IndexKind::OneHot:
      return "class index " + std::to_string(e.index) + at +
             " is out of range for num_classes=" + std::to_string(e.size);
    case IndexKind::ClassTarget:
      return "target " + std::to_string(e.index) + at + " is not a class index in [0, " + std::to_string(e.size) +
             ") nor ignore_index";
    case IndexKind::DivisionByZero:
      return "integer division by zero" + at + " (of " + std::to_string(e.index) +
             "); cast to a floating type for IEEE semantics (inf, nan)";
    case IndexKind::None:
      break;
  }
  return "an index " + std::to_string(e.index) + at + " is out of range";
}

}  // namespace

IndexError* index_error_slot(int device) {
  KILN_CHECK(device >= 0 && device < kMaxDevices, "cuda:", device, ": Kiln tracks ", kMaxDevices, " CUDA devices");
  Slot& slot = g_slots[static_cast<size_t>(device)];
  if (slot.host.load(std::memory_order_acquire) == nullptr) {
    std::lock_guard<std::mutex> lock(g_making);
    if (slot.host.load(std::memory_order_relaxed) == nullptr) {
      OnDevice on(device);
      void* p = nullptr;
      check(cudaHostAlloc(&p, sizeof(IndexError), cudaHostAllocMapped), "cudaHostAlloc for the index check");
      std::memset(p, 0, sizeof(IndexError));
      void* d = nullptr;
      check(cudaHostGetDevicePointer(&d, p, 0), "cudaHostGetDevicePointer for the index check");
      slot.device = static_cast<IndexError*>(d);
      slot.host.store(static_cast<IndexError*>(p), std::memory_order_release);
    }
  }
  return slot.device;
}

void raise_index_error(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  volatile IndexError* e = g_slots[static_cast<size_t>(device)].host.load(std::memory_order_acquire);
  if (e == nullptr || e->kind == 0) return;
  IndexError seen;
  seen.kind = e->kind;
  seen.index = e->index;
  seen.position = e->position;
  seen.size = e->size;
  e->index = 0;
  e->position = 0;
  e->size = 0;
  e->kind = 0;
  KILN_FAIL("CUDA: ", describe(seen), "; a kernel on cuda:", device,
            " met it, and it is reported where the host next waited for that device");
}

}  // namespace kiln::cuda

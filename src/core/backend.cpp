#include "kiln/backend.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "kiln/error.h"

namespace kiln {
namespace {

std::atomic<Backend*>* table() {
  static std::atomic<Backend*> backends[kNumDeviceTypes] = {};
  static const bool cpu_registered = [] {
    static HostMemoryBackend cpu;
    backends[static_cast<int>(DeviceType::CPU)].store(&cpu);
    return true;
  }();
  (void)cpu_registered;
  return backends;
}

}  // namespace

void HostMemoryBackend::copy_to_host(void* dst, const void* src, size_t n, int) { std::memcpy(dst, src, n); }
void HostMemoryBackend::copy_from_host(void* dst, const void* src, size_t n, int) { std::memcpy(dst, src, n); }

void register_backend(DeviceType type, Backend* b) { table()[static_cast<int>(type)].store(b); }

Backend* find_backend(DeviceType type) { return table()[static_cast<int>(type)].load(); }

Backend& backend(DeviceType type) {
  if (Backend* b = find_backend(type)) return *b;
  std::string present;
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (find_backend(static_cast<DeviceType>(t)))
      present += std::string(present.empty() ? "" : ", ") + device_type_name(static_cast<DeviceType>(t));
  KILN_FAIL("no ", device_type_name(type), " backend in this build of Kiln (it has: ", present, ")");
}

Allocator* get_allocator(Device device) { return &backend(device.type).allocator(device.index); }

void copy_between(Device dst_device, void* dst, Device src_device, const void* src, size_t nbytes) {
  if (nbytes == 0) return;
  Backend &from = backend(src_device.type), &to = backend(dst_device.type);
  if (from.host_memory() && to.host_memory()) {
    std::memcpy(dst, src, nbytes);
  } else if (from.host_memory()) {
    to.copy_from_host(dst, src, nbytes, dst_device.index);
  } else if (to.host_memory()) {
    from.copy_to_host(dst, src, nbytes, src_device.index);
  } else {  // between two devices: through the host
    std::unique_ptr<char[]> staging(new char[nbytes]);
    from.copy_to_host(staging.get(), src, nbytes, src_device.index);
    to.copy_from_host(dst, staging.get(), nbytes, dst_device.index);
  }
}

}  // namespace kiln

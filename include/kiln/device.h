#pragma once
// Where a tensor lives. Ops are defined once; kernels are registered per backend.
#include <cstdint>
#include <string>

namespace kiln {

// Reference: plain loops in host memory for a subset of ops, which the test
// suite checks against the CPU; it proves the backend seam without hardware.
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1, Reference = 2 };
constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

inline Device cpu_device() { return Device{DeviceType::CPU, 0}; }
const char* device_type_name(DeviceType t);
// "cpu", "cuda:1", "reference" (index 0 when omitted); throws listing the names.
Device parse_device(const std::string& text);

}  // namespace kiln

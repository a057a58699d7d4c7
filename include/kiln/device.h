#pragma once
// Where a tensor lives. Ops are defined once; kernels are registered per backend.
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

inline Device cpu_device() { return Device{DeviceType::CPU, 0}; }
const char* device_type_name(DeviceType t);

}  // namespace kiln

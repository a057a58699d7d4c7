#pragma once
// Where a tensor lives. Ops are defined once; kernels are registered per backend.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// The device kinds Kiln names itself, in fixed slots; the slots after them
// take the kinds a backend library brings (register_device_type), so a new
// kind of device needs no rebuild of Kiln. Reference: plain loops for a
// subset of ops, in memory the host cannot read directly, which the test
// suite checks against the CPU; it proves the backend seam without hardware.
enum class DeviceType : uint8_t { CPU = 0, CUDA = 1, Reference = 2 };
constexpr int kNumDeviceTypes = 8;  // slots, named or free

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

inline Device cpu_device() { return Device{DeviceType::CPU, 0}; }
// "cpu", "cuda", a registered kind's name; "?" for a free slot.
const char* device_type_name(DeviceType t);
// "cpu", "cuda:1", "reference" (index 0 when omitted); throws listing the names.
Device parse_device(const std::string& text);

// The slot of the device kind `name` (lowercase letters, digits and '_',
// starting with a letter: "npu"): the slot that already has that name, or
// the next free one, which takes it. Throws when the name is not an
// identifier or every slot is taken.
DeviceType register_device_type(const std::string& name);
// Whether `name` may name a device kind.
bool valid_device_kind_name(const std::string& name);
// The kinds with a name (Kiln's and the registered ones), in slot order.
std::vector<DeviceType> device_types();

}  // namespace kiln

#include "kiln/device.h"

#include <array>
#include <atomic>
#include <cstring>
#include <mutex>

#include "kiln/error.h"

namespace kiln {
namespace {

// Slot names, written once each (under the mutex) and read without it:
// a name never changes once a slot has it.
std::array<std::atomic<const char*>, kNumDeviceTypes>& names() {
  static std::array<std::atomic<const char*>, kNumDeviceTypes> table{{{"cpu"}, {"cuda"}, {"reference"}}};
  return table;
}

std::string known_devices() {
  std::string s;
  for (DeviceType t : device_types()) {
    s += std::string(s.empty() ? "" : ", ") + device_type_name(t);
    if (t != DeviceType::CPU) s += "[:N]";
  }
  return s;
}

}  // namespace

bool valid_device_kind_name(const std::string& s) {
  if (s.empty() || s.size() > 32 || s[0] < 'a' || s[0] > 'z') return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

const char* device_type_name(DeviceType t) {
  const auto i = static_cast<size_t>(t);
  const char* name = i < names().size() ? names()[i].load() : nullptr;
  return name ? name : "?";
}

std::vector<DeviceType> device_types() {
  std::vector<DeviceType> types;
  for (size_t i = 0; i < names().size(); ++i)
    if (names()[i].load()) types.push_back(static_cast<DeviceType>(i));
  return types;
}

DeviceType register_device_type(const std::string& name) {
  KILN_CHECK(valid_device_kind_name(name), "device kind '", name,
             "': a device kind is named by a lowercase identifier (letters, digits and '_', starting with a letter, "
             "at most 32 characters), as in npu");
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (DeviceType t : device_types())
    if (name == device_type_name(t)) return t;
  for (size_t i = 0; i < names().size(); ++i) {
    if (names()[i].load()) continue;
    names()[i].store(strdup(name.c_str()));  // lives as long as the process, as the slot's name
    return static_cast<DeviceType>(i);
  }
  KILN_FAIL("device kind '", name, "' cannot be registered: all ", kNumDeviceTypes, " slots are taken (",
            known_devices(), ")");
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

Device parse_device(const std::string& text) {
  size_t colon = text.find(':');
  std::string name = text.substr(0, colon);
  int index = 0;
  if (colon != std::string::npos) {
    const std::string digits = text.substr(colon + 1);
    KILN_CHECK(!digits.empty() && digits.size() < 6 && digits.find_first_not_of("0123456789") == std::string::npos,
               "device '", text, "': the index after ':' must be a number, as in cuda:1");
    index = std::stoi(digits);
  }
  for (DeviceType t : device_types())
    if (name == device_type_name(t)) return Device{t, index};
  KILN_FAIL("unknown device '", text, "'; devices are ", known_devices(),
            " (a backend library loaded through KILN_PLUGIN_PATH adds its own)");
}

}  // namespace kiln

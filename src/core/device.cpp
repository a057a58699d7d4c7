#include "kiln/device.h"

#include "kiln/error.h"

namespace kiln {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return "cuda";
    case DeviceType::Reference: return "reference";
  }
  return "?";
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
  for (DeviceType t : {DeviceType::CPU, DeviceType::CUDA, DeviceType::Reference})
    if (name == device_type_name(t)) return Device{t, index};
  KILN_FAIL("unknown device '", text, "'; devices are cpu, cuda[:N] and reference[:N]");
}

}  // namespace kiln

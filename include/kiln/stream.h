#pragma once
// Queues of device work, and points in them. A kernel's work goes to its
// stream in order; an event marks a point another stream or the host can
// wait for. On the host backends (the CPU, the reference backend) work runs
// as it is issued, so streams are null handles and events are times.
#include <cstdint>

#include "kiln/device.h"

namespace kiln {

struct Stream {
  Device device;
  void* handle = nullptr;  // the backend's (a cudaStream_t); null: the device's default queue
};

struct Event {
  Device device;
  void* handle = nullptr;  // the backend's (a cudaEvent_t); null on the host backends
  int64_t host_ns = 0;     // when it was recorded, where the work is done as issued
};

}  // namespace kiln

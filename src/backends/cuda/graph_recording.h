#pragma once
// A compiled graph's run recorded as a CUDA graph (Backend::record_steps):
// its steps captured on a stream of the recording's own, their scratch
// memory from a pool only recordings use (a replay writes the addresses the
// capture got, so no other tensor may ever be given them), and replayed by
// one launch.
#include <functional>
#include <memory>
#include <string>

#include "kiln/allocator.h"
#include "kiln/backend.h"

namespace kiln::cuda {

// While this thread records on `device`: the stream its kernels queue on
// and the allocator their memory comes from; nullptr otherwise.
struct Recorder {
  int device = 0;
  void* stream = nullptr;
  Allocator* pool = nullptr;
};
const Recorder* recorder_of_this_thread(int device);

// The recordings' memory pool on `device` (empty before the first
// recording there): allocator_stats adds it to the device's.
AllocatorStats recording_memory_stats(int device);

// Captures `count` steps on `device`, then launches the graph once (the
// captured work has not run); nullptr with *why when a step does what a
// graph cannot hold (it synchronizes, or copies from pageable memory).
std::unique_ptr<Backend::Recording> record_steps(int device, size_t count, const std::function<void(size_t)>& step,
                                                 std::string* why);

}  // namespace kiln::cuda

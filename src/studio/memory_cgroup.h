#pragma once
// A job's memory, enforced by the kernel: a memory cgroup of its own under
// the studio's, with the job's resources.memory_mb as its limit (cgroup v2's
// memory.max where the studio's cgroup has the memory controller, else v1's
// memory.limit_in_bytes). A process that takes the job past it is killed by
// the kernel, and the job says so. Where no memory cgroup can be written (a
// container without delegation), memory stays a claim for admission only.
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::studio {

class MemoryCgroup {
 public:
  // nullptr, with *why, where this machine gives the studio no memory cgroup to make one in.
  static std::unique_ptr<MemoryCgroup> create(const std::string& name, int64_t limit_mb, std::string* why);
  ~MemoryCgroup();  // removes it; its processes must be gone
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  // The file a process joins it by writing its pid.
  const std::string& procs_file() const { return procs_; }
  // Puts the calling process in the cgroup whose procs_file() this is: for a
  // child between fork and exec (system calls only). False when it cannot.
  static bool join(const char* procs_file);
  // Whether the kernel has killed a process of it for going past its limit.
  bool out_of_memory() const;
  int64_t limit_mb() const { return limit_mb_; }

 private:
  MemoryCgroup(std::string dir, bool v2, int64_t limit_mb);
  std::string dir_, procs_;
  bool v2_ = false;
  int64_t limit_mb_ = 0;
};

}  // namespace kiln::studio

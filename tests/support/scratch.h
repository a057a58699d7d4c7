#pragma once
// Scratch folders for tests: made empty under the temp folder, and removed
// when the process that made them exits, so test runs leave nothing behind.
// Forked children (the distributed tests' ranks) exit without removing their
// parent's folders.
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::testing {

namespace detail {
class ScratchFolders {
 public:
  static ScratchFolders& instance() {
    static ScratchFolders folders;
    return folders;
  }
  void add(const std::filesystem::path& dir) {
    std::lock_guard lock(mutex_);
    dirs_.push_back(dir);
  }
  ~ScratchFolders() {
    if (::getpid() != owner_) return;
    std::error_code ignored;
    for (const auto& d : dirs_) std::filesystem::remove_all(d, ignored);
  }

 private:
  ScratchFolders() = default;
  const pid_t owner_ = ::getpid();
  std::mutex mutex_;
  std::vector<std::filesystem::path> dirs_;
};
}  // namespace detail

// An empty folder named after `name` and this process, removed at exit.
inline std::filesystem::path scratch_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  detail::ScratchFolders::instance().add(dir);
  return dir;
}

}  // namespace kiln::testing

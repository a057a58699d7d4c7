#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "kiln/error.h"

namespace kiln::io {
namespace {

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    KILN_CHECK(w > 0, "cannot write '", path, "': ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void fsync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the rename itself has happened
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_file_atomic(const std::string& path, const ByteChunks& chunks) {
  std::filesystem::path target(path);
  std::string tmp = (target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path()).string() + "/." +
                    target.filename().string() + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  KILN_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    for (const auto& [data, bytes] : chunks) write_all(fd, data, bytes, tmp);
    KILN_CHECK(::fsync(fd) == 0, "cannot flush '", tmp, "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    KILN_FAIL("cannot move the new file into place at '", path, "': ", std::strerror(err));
  }
  fsync_dir(target.parent_path());
}

}  // namespace kiln::io

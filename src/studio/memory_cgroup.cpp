#include "studio/memory_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kiln::studio {
namespace {

namespace fs = std::filesystem;

// This process's cgroup in a hierarchy: "0::/path" (v2) or "N:memory:/path" (v1).
std::string own_cgroup(bool v2) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (v2 ? line.compare(0, a, "0") == 0 && controllers.empty() : controllers == "memory") return line.substr(b + 1);
  }
  return "";
}

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return out.good();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The value of `key` in a flat keyed file ("oom_kill 1").
int64_t keyed(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  std::string k;
  int64_t v = 0;
  while (lines >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

MemoryCgroup::MemoryCgroup(std::string dir, bool v2, int64_t limit_mb)
    : dir_(std::move(dir)), procs_(dir_ + "/cgroup.procs"), v2_(v2), limit_mb_(limit_mb) {}

std::unique_ptr<MemoryCgroup> MemoryCgroup::create(const std::string& name, int64_t limit_mb, std::string* why) {
  const std::string bytes = std::to_string(limit_mb * 1024 * 1024);
  // v2: a child of the studio's cgroup, where its parent offers the memory controller.
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    const std::string own = own_cgroup(true);
    const std::string parent = std::string(mount) + (own == "/" ? "" : own);
    if (own.empty() || read_file(parent + "/cgroup.controllers").find("memory") == std::string::npos) continue;
    if (read_file(parent + "/cgroup.subtree_control").find("memory") == std::string::npos) continue;
    const std::string dir = parent + "/" + name;
    std::error_code ec;
    fs::create_directory(dir, ec);
    if (ec) continue;
    if (write_file(dir + "/memory.max", bytes) && write_file(dir + "/memory.swap.max", "0"))
      return std::unique_ptr<MemoryCgroup>(new MemoryCgroup(dir, true, limit_mb));
    fs::remove(dir, ec);
  }
  // v1: the memory hierarchy.
  const std::string own = own_cgroup(false);
  if (!own.empty()) {
    const std::string dir = "/sys/fs/cgroup/memory" + (own == "/" ? std::string() : own) + "/" + name;
    std::error_code ec;
    fs::create_directory(dir, ec);
    if (!ec) {
      if (write_file(dir + "/memory.limit_in_bytes", bytes)) {
        write_file(dir + "/memory.memsw.limit_in_bytes", bytes);  // no swapping past it, where swap is accounted
        return std::unique_ptr<MemoryCgroup>(new MemoryCgroup(dir, false, limit_mb));
      }
      fs::remove(dir, ec);
    }
  }
  if (why) *why = "no writable memory cgroup (cgroup v2 with the memory controller delegated, or v1's memory hierarchy)";
  return nullptr;
}

MemoryCgroup::~MemoryCgroup() {
  // A cgroup goes once its last process has; the kernel may take a moment to see that.
  for (int attempt = 0; attempt < 50 && ::rmdir(dir_.c_str()) != 0; ++attempt) ::usleep(20000);
}

bool MemoryCgroup::join(const char* procs_file) {
  char digits[24], text[24];
  int n = 0;
  for (long v = ::getpid(); v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  const int fd = ::open(procs_file, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = ::write(fd, text, static_cast<size_t>(n)) == n;
  ::close(fd);
  return written;
}

bool MemoryCgroup::out_of_memory() const {
  return v2_ ? keyed(read_file(dir_ + "/memory.events"), "oom_kill") > 0
             : keyed(read_file(dir_ + "/memory.oom_control"), "oom_kill") > 0;
}

}  // namespace kiln::studio

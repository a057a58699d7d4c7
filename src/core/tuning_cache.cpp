#include "core/tuning_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "kiln/error.h"

namespace kiln::tuning {
namespace {

uint64_t fnv1a(const std::string& text, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// The first line of /proc/cpuinfo that starts with `field`.
std::string cpuinfo(const std::string& field) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, field.size(), field) == 0) return line;
  return "";
}

// The folder the environment names, or "" for none (off, or no home).
std::string cache_folder() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return std::string(dir) == "off" ? "" : dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/kiln";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/kiln";
  return "";
}

bool single_word(const std::string& s) { return !s.empty() && s.find_first_of(" \t\r\n") == std::string::npos; }

// Each build of Kiln writes its own file: a new one's first write removes
// those untouched for 30 days (older builds', other machines' on a shared home).
void forget_old_builds(const std::filesystem::path& folder) {
  std::error_code error;
  const auto cutoff = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24 * 30);
  for (const auto& entry : std::filesystem::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tuning-", 0) != 0 || entry.path().extension() != ".txt") continue;
    std::error_code ignored;
    if (entry.last_write_time(ignored) < cutoff) std::filesystem::remove(entry.path(), ignored);
  }
}

}  // namespace

std::string machine_fingerprint() {
  static const std::string fingerprint = [] {
    std::ostringstream what;
    what << cpuinfo("model name") << '\n' << cpuinfo("flags") << '\n';
    what << sysconf(_SC_LEVEL1_DCACHE_SIZE) << ' ' << sysconf(_SC_LEVEL2_CACHE_SIZE) << ' '
         << sysconf(_SC_LEVEL3_CACHE_SIZE) << ' ' << sysconf(_SC_NPROCESSORS_ONLN) << '\n';
    // The build: the library this code is in, by its size and time.
    Dl_info info{};
    struct stat st {};
    if (dladdr(reinterpret_cast<void*>(&machine_fingerprint), &info) && info.dli_fname &&
        ::stat(info.dli_fname, &st) == 0)
      what << info.dli_fname << ' ' << st.st_size << ' ' << st.st_mtim.tv_sec << '.' << st.st_mtim.tv_nsec;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a(what.str())));
    return std::string(hex);
  }();
  return fingerprint;
}

TuningCache::TuningCache(std::string file) : file_(std::move(file)) {}

void TuningCache::load() {
  loaded_ = true;
  if (file_.empty()) return;
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string table, key, value, extra;
    if (words >> table >> key >> value && !(words >> extra)) entries_[{table, key}] = value;
  }
}

std::optional<std::string> TuningCache::lookup(const std::string& table, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_) load();
  auto it = entries_.find({table, key});
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void TuningCache::remember(const std::string& table, const std::string& key, const std::string& value) {
  KILN_ASSERT(single_word(table) && single_word(key) && single_word(value), "tuning cache entries are single words: '",
              table, "' '", key, "' '", value, "'");
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_) load();
  entries_[{table, key}] = value;
  if (file_.empty()) return;
  std::error_code ignored;
  const std::filesystem::path folder = std::filesystem::path(file_).parent_path();
  std::filesystem::create_directories(folder, ignored);
  if (!std::filesystem::exists(file_, ignored)) forget_old_builds(folder);
  const int fd = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;  // a folder that cannot be written: the process keeps it
  const std::string line = table + " " + key + " " + value + "\n";
  [[maybe_unused]] const ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
}

TuningCache& machine_cache() {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<TuningCache>> by_folder;  // kept: callers hold references
  const std::string folder = cache_folder();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<TuningCache>& cache = by_folder[folder];
  if (!cache)
    cache = std::make_unique<TuningCache>(folder.empty() ? "" : folder + "/tuning-" + machine_fingerprint() + ".txt");
  return *cache;
}

}  // namespace kiln::tuning

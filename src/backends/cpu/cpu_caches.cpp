#include "backends/cpu/cpu_caches.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/cpu/gemm_tile.h"

namespace kiln::cpu {
namespace {

// Linux's description of cpu0's data or unified cache at `level`, in bytes
// (0 where it has none: some virtual machines publish no cache folders).
int64_t sysfs_cache_bytes(int level) {
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int at = 0;
    std::string type, size;
    if (!(level_file >> at) || !(type_file >> type) || !(size_file >> size)) break;
    if (at != level || type == "Instruction" || size.empty()) continue;
    const int64_t number = std::strtoll(size.c_str(), nullptr, 10);  // (0 for text that is no number)
    const char unit = size.back();
    return unit == 'K' ? number << 10 : unit == 'M' ? number << 20 : number;
  }
  return 0;
}

int64_t reported(int name, int level) {
  const long bytes = sysconf(name);
  return bytes > 0 ? bytes : sysfs_cache_bytes(level);
}

}  // namespace

CpuCaches caches_from_reports(int64_t l1d_bytes, int64_t l2_bytes) {
  CpuCaches c;
  c.l1d_bytes = l1d_bytes > 0 ? std::clamp<int64_t>(l1d_bytes, 16 << 10, 128 << 10) : 32 << 10;
  c.l2_bytes = l2_bytes > 0 ? std::clamp<int64_t>(l2_bytes, 128 << 10, 4 << 20) : 512 << 10;
  return c;
}

const CpuCaches& cpu_caches() {
  static const CpuCaches caches =
      caches_from_reports(reported(_SC_LEVEL1_DCACHE_SIZE, 1), reported(_SC_LEVEL2_CACHE_SIZE, 2));
  return caches;
}

int64_t linear_pass_depth(const CpuCaches& caches) {
  // Bytes per term: two panels' 16 floats and one float of each tile row.
  const int64_t per_term = (2 * gemm::kCols + gemm::kRows) * 4;
  int64_t depth = 64;
  while (depth * 2 * per_term <= caches.l1d_bytes && depth < 1024) depth *= 2;
  return depth;
}

int64_t linear_block_rows(const CpuCaches& caches, int64_t depth) {
  const int64_t rows = caches.l2_bytes / 7 / (depth * 4);
  return std::max<int64_t>(1, rows / gemm::kRows) * gemm::kRows;
}

int64_t patch_pass_depth(const CpuCaches& caches) {
  return std::max<int64_t>(256, caches.l2_bytes / 4 / (gemm::kCols * 4));
}

}  // namespace kiln::cpu

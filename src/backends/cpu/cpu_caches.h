#pragma once
// The data caches of the CPU Kiln runs on (per core), and the block sizes of
// Kiln's own kernels that follow from them: a slice of weights must stay in
// L1 or L2 while a kernel passes over it, and those caches differ between
// vendors and generations (32 to 48 KB of L1, 256 KB to 2 MB of L2), so the
// sizes are worked out here rather than fitted to one machine.
#include <cstdint>

namespace kiln::cpu {

struct CpuCaches {
  int64_t l1d_bytes;
  int64_t l2_bytes;
};

// As the CPU reports them (CPUID through the C library, else Linux's sysfs),
// read once; 32 KB and 512 KB where neither says, and values outside what
// any x86 core has (a virtual machine's) clamped to the nearest that does.
const CpuCaches& cpu_caches();
// The same from reported sizes (0 or less: not reported).
CpuCaches caches_from_reports(int64_t l1d_bytes, int64_t l2_bytes);

// Terms of the products a packed linear layer takes per pass: a power of
// two, so that a pair of weight panels' slice and a register tile's rows of
// x fit in L1 (256 with 48 KB, 128 with 32 KB).
int64_t linear_pass_depth(const CpuCaches& caches);
// Rows of x per block: a whole number of register tiles whose slice of x
// (rows x depth floats) takes about a seventh of L2, the rest holding the
// weights streaming through (144 rows at depth 256 with 1 MB).
int64_t linear_block_rows(const CpuCaches& caches, int64_t depth);
// Patch values per pass of the gathered convolution: a panel's slice
// (16 floats a value) takes a quarter of L2 (4096 with 1 MB).
int64_t patch_pass_depth(const CpuCaches& caches);

}  // namespace kiln::cpu

// Fuzz target: arbitrary bytes as a MindSpore .ckpt file. Every input must
// either load or be refused with kiln::Error; crashes, hangs and other
// exceptions are bugs.
#include <cstdint>
#include <cstdio>
#include <string>

#include "kiln/io.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("kiln_fuzz_mindspore.ckpt");
  const std::string& path = file.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  try {
    kiln::io::load_mindspore_checkpoint(path);
  } catch (const kiln::Error&) {
  }
  return 0;
}

// Fuzz target: arbitrary bytes as a safetensors file. Every input must either
// load or be refused with kiln::Error; crashes, hangs and other exceptions are bugs.
#include <cstdint>
#include <string>

#include "kiln/io.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("kiln_fuzz_safetensors");
  if (!file.write(data, size)) return 0;
  try {
    kiln::io::load_safetensors(file.path);
  } catch (const kiln::Error&) {
  }
  return 0;
}

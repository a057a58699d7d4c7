// Fuzz target: arbitrary bytes as the data.pkl of a torch.save archive that
// also holds one 64-byte storage "0". Every input must either load or be
// refused with kiln::Error; crashes, hangs and other exceptions are bugs.
#include <unistd.h>

#include <cstdint>
#include <string>

#include "kiln/io.h"
#include "scratch_file.h"
#include "support/zip_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("kiln_fuzz_torch", ".pt");
  const std::string& path = file.path;
  static const std::string storage(64, '\x01');
  const std::string pickle(reinterpret_cast<const char*>(data), size);
  if (!kiln::testing::write_zip(path, {{"archive/data.pkl", pickle}, {"archive/data/0", storage}})) return 0;
  try {
    kiln::io::load_torch_file(path);
  } catch (const kiln::Error&) {
  }
  return 0;
}

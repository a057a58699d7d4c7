// Fuzz target: arbitrary bytes as the data.pkl of a torch.save archive that
// also holds one 64-byte storage "0". Every input must either load or be
// refused with kiln::Error; crashes, hangs and other exceptions are bugs.
#include <unistd.h>
#include <zip.h>

#include <cstdint>
#include <string>

#include "kiln/io.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ScratchFile file("kiln_fuzz_torch", ".pt");
  const std::string& path = file.path;
  static const std::string storage(64, '\x01');
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (!z) return 0;
  zip_file_add(z, "archive/data.pkl", zip_source_buffer(z, data, size, 0), ZIP_FL_OVERWRITE);
  zip_file_add(z, "archive/data/0", zip_source_buffer(z, storage.data(), storage.size(), 0), ZIP_FL_OVERWRITE);
  if (zip_close(z) != 0) {
    zip_discard(z);
    return 0;
  }
  try {
    kiln::io::load_torch_file(path);
  } catch (const kiln::Error&) {
  }
  return 0;
}

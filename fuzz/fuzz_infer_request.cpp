// Fuzz target: arbitrary bytes as an Open Inference Protocol infer request
// body. The first byte picks whether it carries an Inference-Header-Content-
// Length (and which). Every input must parse or be refused with BadRequest.
#include <cstdint>
#include <string>

#include "serve/oip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  long long header_length = data[0] < 128 ? -1 : static_cast<long long>(data[0] - 128) * 4;
  if (header_length > static_cast<long long>(body.size())) header_length = static_cast<long long>(body.size());
  try {
    kiln::serve::parse_infer_request(body, header_length);
  } catch (const kiln::serve::BadRequest&) {
  }
  return 0;
}

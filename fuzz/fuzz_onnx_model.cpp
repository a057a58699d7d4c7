// Fuzz target: arbitrary bytes as a model file, ONNX or MindIR (told apart by
// the first byte, as InferenceSession does). Every input must either load
// (and then run on zeros of its declared input shapes) or be refused with
// kiln::Error; crashes, hangs and other exceptions are bugs.
#include <cstdint>
#include <string>

#include "kiln/kiln.h"
#include "kiln/runtime.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::SessionOptions o;
    o.optimization_level = 0;  // node by node: the converters and kernels see the fuzzed model as is
    auto session = kiln::InferenceSession::from_bytes(std::string(reinterpret_cast<const char*>(data), size), o, "fuzz");
    std::vector<kiln::Tensor> inputs;
    for (const auto& info : session.inputs()) {
      kiln::Shape s;
      int64_t numel = 1;
      for (int64_t d : info.shape) {
        s.push_back(d < 0 ? 1 : d);
        numel *= s.back();
      }
      if (!info.shape_known || numel > (1 << 16)) return 0;
      inputs.push_back(kiln::zeros(s, info.dtype));
    }
    session.run(inputs);
  } catch (const kiln::Error&) {
  }
  return 0;
}

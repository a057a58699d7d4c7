#include "io/file_format.h"

#include <cstring>

namespace kiln::io::detail {
namespace {

bool starts_with(const uint8_t* bytes, size_t size, const char* magic, size_t n) {
  return size >= n && std::memcmp(bytes, magic, n) == 0;
}

}  // namespace

std::string foreign_format_hint(const uint8_t* bytes, size_t size, const std::string& path) {
  const std::string convert = "; convert its weights with 'kiln ckpt convert " + path +
                              " --recipe RECIPE.yaml --out weights.safetensors' (see 'kiln ckpt diff' for the names)";
  if (starts_with(bytes, size, "PK\x03\x04", 4)) return "it is a PyTorch checkpoint (a torch.save zip archive)" + convert;
  if (size >= 2 && bytes[0] == 0x80 && bytes[1] >= 2 && bytes[1] <= 5)
    return "it is a pickle (a PyTorch checkpoint in the legacy format?): save it again with a current torch.save, "
           "then" + convert.substr(1);
  if (starts_with(bytes, size, "\x93NUMPY", 6)) return "it is a NumPy .npy array, not a checkpoint";
  if (starts_with(bytes, size, "\x1f\x8b", 2)) return "it is gzip-compressed: decompress it first (gunzip)";
  // An ONNX ModelProto starts with ir_version (field 1, varint) and has "onnx" or an opset near the start.
  if (size >= 2 && bytes[0] == 0x08 && bytes[1] <= 0x20)
    return "it looks like an ONNX model: run it with 'kiln run' or 'kiln serve', or load it with "
           "kiln::InferenceSession";
  return "";
}

}  // namespace kiln::io::detail

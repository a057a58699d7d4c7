#pragma once
// Image files: JPEG (libjpeg-turbo) and PNG (libpng), decoded to uint8 [H, W, C].
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::data {

// Decodes JPEG or PNG bytes (the format is read from the signature) into
// uint8 [H, W, channels]; channels is 3 (RGB) or 1 (grey), converting as needed.
Tensor decode_image(const uint8_t* bytes, size_t size, int channels = 3);
Tensor read_image(const std::string& path, int channels = 3);

// uint8 [H, W, 1 or 3] to file bytes.
std::vector<uint8_t> encode_png(const Tensor& image);
std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality = 95);

std::vector<uint8_t> read_file_bytes(const std::string& path);

}  // namespace kiln::data

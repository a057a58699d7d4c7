// JPEG through libjpeg's setjmp error protocol (no C++ objects live across
// the jump), PNG through libpng's simplified API, which reports errors in a
// message field instead.
#include <png.h>
#include <stdio.h>  // jpeglib.h needs FILE and size_t declared first
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <fstream>

#include "kiln/data/image.h"

namespace kiln::data {
namespace {

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr info) {
  auto* err = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg reports corrupt or truncated data ("Premature end of JPEG file") as
// a warning on stderr and goes on with gray pixels: make it an error instead,
// so a damaged file is named rather than trained on. Trace messages (level
// > 0) stay silent.
void jpeg_emit_message(j_common_ptr info, int level) {
  if (level < 0) jpeg_error_exit(info);
}

// Returns false with err->message set on failure; `out` holds H*W*channels bytes.
bool jpeg_decode_into(const uint8_t* bytes, size_t size, int channels, std::vector<uint8_t>& out, int& height,
                      int& width, JpegError* err) {
  jpeg_decompress_struct info;
  info.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_error_exit;
  err->mgr.emit_message = jpeg_emit_message;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  height = static_cast<int>(info.output_height);
  width = static_cast<int>(info.output_width);
  out.resize(static_cast<size_t>(height) * static_cast<size_t>(width) * static_cast<size_t>(channels));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out.data() + static_cast<size_t>(info.output_scanline) * static_cast<size_t>(width) * static_cast<size_t>(channels);
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Tensor from_pixels(const std::vector<uint8_t>& pixels, int height, int width, int channels) {
  Tensor t = Tensor::empty({height, width, channels}, DType::UInt8);
  std::memcpy(t.raw_data(), pixels.data(), pixels.size());
  return t;
}

void check_image(const Tensor& image, const char* what) {
  KILN_CHECK(image.dtype() == DType::UInt8 && image.dim() == 3 && (image.shape()[2] == 1 || image.shape()[2] == 3),
             what, ": needs a uint8 [H, W, 1 or 3] image, got ", image.meta_str());
}

}  // namespace

Tensor decode_image(const uint8_t* bytes, size_t size, int channels) {
  KILN_CHECK(channels == 1 || channels == 3, "decode_image: channels must be 1 or 3, got ", channels);
  KILN_CHECK(size >= 8, "decode_image: ", size, " bytes are too few to be an image");
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes[0] == 0xFF && bytes[1] == 0xD8) {
    std::vector<uint8_t> pixels;
    int height = 0, width = 0;
    JpegError err{};
    KILN_CHECK(jpeg_decode_into(bytes, size, channels, pixels, height, width, &err),
               "decode_image: not a valid JPEG, or corrupt or truncated (", err.message, ")");
    return from_pixels(pixels, height, width, channels);
  }
  if (std::memcmp(bytes, kPng, 8) == 0) {
    png_image image;
    std::memset(&image, 0, sizeof(image));
    image.version = PNG_IMAGE_VERSION;
    KILN_CHECK(png_image_begin_read_from_memory(&image, bytes, size), "decode_image: not a valid PNG (",
               image.message, ")");
    image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    std::vector<uint8_t> pixels(PNG_IMAGE_SIZE(image));
    bool ok = png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr);
    // A warning (a bad CRC, extra data) also means damaged data: refuse it.
    ok = ok && (image.warning_or_error & PNG_IMAGE_WARNING) == 0;
    std::string message = image.message;
    png_image_free(&image);
    KILN_CHECK(ok, "decode_image: the PNG is corrupt or truncated (", message, ")");
    return from_pixels(pixels, static_cast<int>(image.height), static_cast<int>(image.width), channels);
  }
  KILN_FAIL("decode_image: the data is neither JPEG nor PNG (first bytes ", static_cast<int>(bytes[0]), " ",
            static_cast<int>(bytes[1]), "); Kiln reads .jpg/.jpeg and .png files");
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

Tensor read_image(const std::string& path, int channels) {
  std::vector<uint8_t> bytes = read_file_bytes(path);
  try {
    return decode_image(bytes.data(), bytes.size(), channels);
  } catch (const std::exception& e) {
    KILN_FAIL("'", path, "': ", e.what());
  }
}

std::vector<uint8_t> encode_png(const Tensor& image) {
  check_image(image, "encode_png");
  Tensor c = image.contiguous();
  png_image info;
  std::memset(&info, 0, sizeof(info));
  info.version = PNG_IMAGE_VERSION;
  info.width = static_cast<png_uint_32>(c.shape()[1]);
  info.height = static_cast<png_uint_32>(c.shape()[0]);
  info.format = c.shape()[2] == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  KILN_CHECK(png_image_write_to_memory(&info, nullptr, &size, 0, c.raw_data(), 0, nullptr), "encode_png: ",
             info.message);
  std::vector<uint8_t> out(size);
  KILN_CHECK(png_image_write_to_memory(&info, out.data(), &size, 0, c.raw_data(), 0, nullptr), "encode_png: ",
             info.message);
  out.resize(size);
  return out;
}

std::vector<uint8_t> encode_jpeg(const Tensor& image, int quality) {
  check_image(image, "encode_jpeg");
  Tensor c = image.contiguous();
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);  // only fails on programming errors for in-memory output
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(c.shape()[1]);
  info.image_height = static_cast<JDIMENSION>(c.shape()[0]);
  info.input_components = static_cast<int>(c.shape()[2]);
  info.in_color_space = c.shape()[2] == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  const auto* pixels = static_cast<const uint8_t*>(c.raw_data());
  size_t stride = static_cast<size_t>(c.shape()[1] * c.shape()[2]);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels + info.next_scanline * stride);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::vector<uint8_t> out(buffer, buffer + size);
  free(buffer);
  return out;
}

}  // namespace kiln::data

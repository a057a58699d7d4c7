// The idx format of MNIST and Fashion-MNIST: a big-endian header (magic, then
// one 32-bit size per axis) followed by unsigned bytes.
#include <zlib.h>

#include <cstring>
#include <filesystem>

#include "kiln/data.h"
#include "kiln/functional.h"

namespace kiln::data {
namespace {

std::vector<uint8_t> read_maybe_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads raw files unchanged
  KILN_CHECK(f != nullptr, "cannot open '", path, "'");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  std::string msg = gzerror(f, &err);  // copied: gzclose frees the message
  gzclose(f);
  KILN_CHECK(n == 0 && err == Z_OK, "'", path, "' is corrupt or truncated (", msg, "); download or copy it again");
  return out;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Returns the dims and a pointer to the data inside `bytes`.
std::vector<int64_t> parse_idx(const std::vector<uint8_t>& bytes, const std::string& path, const uint8_t*& data) {
  KILN_CHECK(bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0x08,
             "'", path, "' is not an idx file of unsigned bytes (bad magic number)");
  int rank = bytes[3];
  KILN_CHECK(rank >= 1 && rank <= 4 && bytes.size() >= 4 + 4 * static_cast<size_t>(rank), "'", path,
             "' has a malformed idx header");
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(be32(bytes.data() + 4 + 4 * i));
  int64_t count = checked_numel(dims);
  KILN_CHECK(count >= 0, "'", path, "' has a malformed idx header: its shape ", shape_str(dims),
             " holds more elements than any file can");
  KILN_CHECK(bytes.size() == 4 + 4 * static_cast<size_t>(rank) + static_cast<size_t>(count), "'", path, "' holds ",
             bytes.size() - 4 - 4 * rank, " bytes of data but its header promises ", count, " (shape ",
             shape_str(dims), "): truncated or malformed");
  data = bytes.data() + 4 + 4 * rank;
  return dims;
}

std::string find_file(const std::string& dir, const std::string& stem) {
  for (const char* suffix : {".gz", ""}) {
    std::string p = dir + "/" + stem + suffix;
    if (std::filesystem::exists(p)) return p;
  }
  KILN_FAIL("no '", stem, "' (or .gz) in ", dir,
            dir == kFashionMnistDir ? "; install it with: apt-get install dataset-fashion-mnist" : "");
}

}  // namespace

TensorDataset load_mnist(const std::string& dir, const std::string& split) {
  KILN_CHECK(split == "train" || split == "test", "split must be 'train' or 'test', got '", split, "'");
  std::string prefix = split == "train" ? "train" : "t10k";
  std::string ipath = find_file(dir, prefix + "-images-idx3-ubyte");
  std::string lpath = find_file(dir, prefix + "-labels-idx1-ubyte");
  auto ibytes = read_maybe_gzip(ipath), lbytes = read_maybe_gzip(lpath);
  const uint8_t *idata = nullptr, *ldata = nullptr;
  auto idims = parse_idx(ibytes, ipath, idata);
  auto ldims = parse_idx(lbytes, lpath, ldata);
  KILN_CHECK(idims.size() == 3 && ldims.size() == 1 && idims[0] == ldims[0], "'", ipath, "' and '", lpath,
             "' do not describe the same number of images and labels");
  TensorDataset ds;
  // Scale straight into float32: no uint8 or unscaled copy of 60k images on the way.
  ds.inputs = Tensor::empty({idims[0], 1, idims[1], idims[2]}, DType::Float32);
  float* px = ds.inputs.data<float>();
  for (int64_t i = 0; i < ds.inputs.numel(); ++i) px[i] = static_cast<float>(idata[i]) / 255.0f;
  ds.labels = from_buffer(ldata, {ldims[0]}, DType::UInt8).to(DType::Int64);
  return ds;
}

TensorDataset load_fashion_mnist(const std::string& split, const std::string& dir) { return load_mnist(dir, split); }

const std::vector<std::string> kFashionMnistClasses = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                       "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::vector<std::string> dataset_class_names(const std::string& dataset) {
  if (dataset == "fashion_mnist") return kFashionMnistClasses;
  if (dataset == "mnist") return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  if (dataset == "cifar10") return kCifar10Classes;
  return {};
}

}  // namespace kiln::data

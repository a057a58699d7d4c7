// CIFAR-10 binary files: records of one label byte and 3072 pixel bytes
// (1024 red, 1024 green, 1024 blue, rows of 32), 10000 records per file.
#include <cstring>
#include <filesystem>

#include "kiln/data/image.h"
#include "kiln/data/readers.h"

namespace kiln::data {

const std::vector<std::string> kCifar10Classes = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                  "dog",      "frog",       "horse", "ship", "truck"};

TensorDataset load_cifar10(const std::string& dir, const std::string& split) {
  KILN_CHECK(split == "train" || split == "test", "split must be 'train' or 'test', got '", split, "'");
  std::vector<std::string> files;
  if (split == "train")
    for (int i = 1; i <= 5; ++i) files.push_back(dir + "/data_batch_" + std::to_string(i) + ".bin");
  else
    files.push_back(dir + "/test_batch.bin");
  constexpr size_t kRecord = 1 + 3 * 32 * 32;
  std::vector<std::vector<uint8_t>> contents;
  int64_t total = 0;
  for (const auto& f : files) {
    KILN_CHECK(std::filesystem::exists(f), "no '", f, "'; CIFAR-10 needs the binary version ",
               "(cifar-10-binary.tar.gz, files data_batch_1.bin ... data_batch_5.bin and test_batch.bin)");
    contents.push_back(read_file_bytes(f));
    KILN_CHECK(!contents.back().empty() && contents.back().size() % kRecord == 0, "'", f, "' holds ",
               contents.back().size(), " bytes, not a whole number of ", kRecord, "-byte CIFAR-10 records (truncated?)");
    total += static_cast<int64_t>(contents.back().size() / kRecord);
  }
  TensorDataset ds(Tensor::empty({total, 32, 32, 3}, DType::UInt8), Tensor::empty({total}, DType::Int64));
  uint8_t* px = ds.inputs.data<uint8_t>();
  int64_t* labels = ds.labels.data<int64_t>();
  int64_t n = 0;
  for (size_t f = 0; f < contents.size(); ++f) {
    const auto& bytes = contents[f];
    for (size_t r = 0; r < bytes.size() / kRecord; ++r, ++n) {
      const uint8_t* rec = bytes.data() + r * kRecord;
      KILN_CHECK(rec[0] < 10, "'", files[f], "': record ", r, " has label ", static_cast<int>(rec[0]),
                 "; CIFAR-10 labels are 0 to 9 (is this the CIFAR-100 format?)");
      labels[n] = rec[0];
      uint8_t* out = px + n * 3072;
      for (int i = 0; i < 1024; ++i)  // planar RGB to interleaved HWC
        for (int c = 0; c < 3; ++c) out[i * 3 + c] = rec[1 + c * 1024 + i];
    }
  }
  return ds;
}

}  // namespace kiln::data

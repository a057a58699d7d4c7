#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
std::vector<uint8_t> idx(std::vector<uint32_t> dims, std::vector<uint8_t> data) {
  std::vector<uint8_t> out{0, 0, 8, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write(const std::string& path, const std::vector<uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
}

std::string temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("kiln_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

// 3 images of 2x2 pixels.
void write_tiny_mnist(const std::string& dir, bool gzip) {
  std::vector<uint8_t> pixels{0, 255, 51, 102, 1, 2, 3, 4, 255, 255, 255, 255};
  write(dir + "/train-images-idx3-ubyte" + (gzip ? ".gz" : ""), idx({3, 2, 2}, pixels), gzip);
  write(dir + "/train-labels-idx1-ubyte" + (gzip ? ".gz" : ""), idx({3}, {7, 0, 9}), gzip);
}
}  // namespace

TEST(Mnist, ReadsGzipAndRawIdxFiles) {
  for (bool gzip : {true, false}) {
    std::string dir = temp_dir(gzip ? "gz" : "raw");
    write_tiny_mnist(dir, gzip);
    auto ds = data::load_mnist(dir, "train");
    EXPECT_EQ(ds.inputs.shape(), (Shape{3, 1, 2, 2}));
    EXPECT_EQ(ds.labels.to_vector<int64_t>(), (std::vector<int64_t>{7, 0, 9}));
    EXPECT_FLOAT_EQ(ds.inputs.to_vector<float>()[1], 1.0f);
    EXPECT_FLOAT_EQ(ds.inputs.to_vector<float>()[2], 0.2f);
    std::filesystem::remove_all(dir);
  }
}

TEST(Mnist, RefusesBadFilesWithClearMessages) {
  std::string dir = temp_dir("bad");
  write(dir + "/train-images-idx3-ubyte", idx({3, 2, 2}, {1, 2, 3}), false);  // truncated
  write(dir + "/train-labels-idx1-ubyte", idx({3}, {7, 0, 9}), false);
  auto msg = message_of([&] { data::load_mnist(dir, "train"); });
  EXPECT_NE(msg.find("header promises 12"), std::string::npos) << msg;
  write(dir + "/train-images-idx3-ubyte", {1, 2, 3, 4, 5}, false);
  msg = message_of([&] { data::load_mnist(dir, "train"); });
  EXPECT_NE(msg.find("bad magic number"), std::string::npos) << msg;
  msg = message_of([&] { data::load_mnist(dir, "test"); });
  EXPECT_NE(msg.find("no 't10k-images-idx3-ubyte'"), std::string::npos) << msg;
  msg = message_of([&] { data::load_mnist(dir, "validation"); });
  EXPECT_NE(msg.find("'train' or 'test'"), std::string::npos) << msg;
  msg = message_of([&] { data::load_fashion_mnist("train", "/nonexistent"); });
  EXPECT_NE(msg.find("no 'train-images"), std::string::npos) << msg;
  std::filesystem::remove_all(dir);
}

TEST(BatchIterator, VisitsEverySampleOncePerEpochInASeededOrder) {
  data::TensorDataset ds{arange(0.0, 10.0, 1.0).reshape({10, 1}), arange(10)};
  data::BatchIterator it(ds, 4, /*shuffle=*/true, /*drop_remainder=*/false, /*seed=*/3);
  EXPECT_EQ(it.batches_per_epoch(), 3);
  auto epoch = [&] {
    std::vector<int64_t> seen;
    data::Batch b;
    it.start_epoch();
    while (it.next(b)) {
      auto labels = b.labels.to_vector<int64_t>();
      auto inputs = b.inputs.to_vector<float>();
      for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(static_cast<int64_t>(inputs[i]), labels[i]);
      seen.insert(seen.end(), labels.begin(), labels.end());
    }
    return seen;
  };
  auto first = epoch(), second = epoch();
  EXPECT_EQ(first.size(), 10u);
  EXPECT_NE(first, second);  // reshuffled
  std::sort(first.begin(), first.end());
  EXPECT_EQ(first, arange(10).to_vector<int64_t>());
  data::BatchIterator again(ds, 4, true, false, 3);
  data::Batch b;
  again.next(b);
  data::BatchIterator same(ds, 4, true, false, 3);
  data::Batch b2;
  same.next(b2);
  EXPECT_EQ(b.labels.to_vector<int64_t>(), b2.labels.to_vector<int64_t>());
  data::BatchIterator dropping(ds, 4, false, /*drop_remainder=*/true);
  EXPECT_EQ(dropping.batches_per_epoch(), 2);
}

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;
namespace fs = std::filesystem;

namespace {
fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("kiln_readers_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A smooth [h, w, 3] image (no wrap-around: JPEG is lossy on sharp edges), h, w <= 13.
Tensor pattern(int64_t h, int64_t w) {
  Tensor t = Tensor::empty({h, w, 3}, DType::UInt8);
  uint8_t* p = t.data<uint8_t>();
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) p[(y * w + x) * 3 + c] = static_cast<uint8_t>(y * 10 + x * 5 + c * 40);
  return t;
}
}  // namespace

TEST(Cifar10, ReadsRecordsAsHwcImagesAndRefusesBadFiles) {
  fs::path dir = fresh_dir("cifar");
  std::vector<uint8_t> bytes;
  for (int r = 0; r < 3; ++r) {
    bytes.push_back(static_cast<uint8_t>(r * 3));  // label
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 1024; ++i) bytes.push_back(static_cast<uint8_t>((i + c * 100 + r) % 256));
  }
  write_bytes(dir / "test_batch.bin", bytes);
  auto ds = data::load_cifar10(dir.string(), "test");
  ASSERT_EQ(ds.inputs.shape(), (Shape{3, 32, 32, 3}));
  EXPECT_EQ(ds.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 6}));
  const uint8_t* px = ds.inputs.data<uint8_t>();
  // Record 1, pixel (row 2, col 5) = planar index 69, channel 2 (blue).
  EXPECT_EQ(px[3072 + (2 * 32 + 5) * 3 + 2], static_cast<uint8_t>((69 + 200 + 1) % 256));

  bytes.resize(bytes.size() - 10);
  write_bytes(dir / "test_batch.bin", bytes);
  auto msg = message_of([&] { data::load_cifar10(dir.string(), "test"); });
  EXPECT_NE(msg.find("not a whole number of 3073-byte CIFAR-10 records"), std::string::npos) << msg;
  msg = message_of([&] { data::load_cifar10(dir.string(), "train"); });
  EXPECT_NE(msg.find("data_batch_1.bin"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Image, PngRoundTripsExactlyAndJpegClosely) {
  Tensor img = pattern(9, 13);
  auto png = data::encode_png(img);
  Tensor back = data::decode_image(png.data(), png.size());
  EXPECT_EQ(back.shape(), img.shape());
  EXPECT_EQ(back.to_vector<uint8_t>(), img.to_vector<uint8_t>());
  auto jpg = data::encode_jpeg(img, 98);
  Tensor j = data::decode_image(jpg.data(), jpg.size());
  ASSERT_EQ(j.shape(), img.shape());
  auto a = img.to_vector<uint8_t>(), b = j.to_vector<uint8_t>();
  double err = 0;
  for (size_t i = 0; i < a.size(); ++i) err += std::abs(int(a[i]) - int(b[i]));
  EXPECT_LT(err / static_cast<double>(a.size()), 6.0);
  Tensor grey = data::decode_image(png.data(), png.size(), 1);
  EXPECT_EQ(grey.shape(), (Shape{9, 13, 1}));
}

TEST(Image, CorruptFilesAreRefusedWithTheReason) {
  auto png = data::encode_png(pattern(8, 8));
  png.resize(png.size() / 2);
  auto msg = message_of([&] { data::decode_image(png.data(), png.size()); });
  EXPECT_NE(msg.find("PNG"), std::string::npos) << msg;
  auto jpg = data::encode_jpeg(pattern(8, 8));
  std::vector<uint8_t> broken(jpg.begin(), jpg.begin() + 20);
  msg = message_of([&] { data::decode_image(broken.data(), broken.size()); });
  EXPECT_NE(msg.find("not a valid JPEG"), std::string::npos) << msg;
  // Truncated after its header: libjpeg only warns and fills gray; Kiln refuses
  // it, naming the file, and nothing reaches stderr.
  auto big = data::encode_jpeg(pattern(13, 13));
  std::vector<uint8_t> truncated(big.begin(), big.begin() + static_cast<long>(big.size() * 3 / 4));
  fs::path dir = fresh_dir("truncated_jpeg");
  write_bytes(dir / "cut.jpg", truncated);
  ::testing::internal::CaptureStderr();
  msg = message_of([&] { data::read_image((dir / "cut.jpg").string()); });
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_NE(msg.find("cut.jpg"), std::string::npos) << msg;
  EXPECT_NE(msg.find("corrupt or truncated (Premature end of JPEG file)"), std::string::npos) << msg;
  fs::remove_all(dir);
  std::vector<uint8_t> text{'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  msg = message_of([&] { data::decode_image(text.data(), text.size()); });
  EXPECT_NE(msg.find("neither JPEG nor PNG"), std::string::npos) << msg;
}

TEST(ImageFolder, ClassesFromSubfoldersFilesDecodedOnDemand) {
  fs::path dir = fresh_dir("folder");
  fs::create_directories(dir / "dog");
  fs::create_directories(dir / "cat");
  write_bytes(dir / "cat" / "b.png", data::encode_png(pattern(4, 6)));
  write_bytes(dir / "cat" / "a.JPG", data::encode_jpeg(pattern(8, 8)));
  write_bytes(dir / "dog" / "c.png", data::encode_png(pattern(5, 5)));
  write_bytes(dir / "dog" / "notes.txt", {'x'});
  data::ImageFolderDataset ds(dir.string());
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.get(0).input.shape(), (Shape{8, 8, 3}));  // a.JPG sorts first
  EXPECT_EQ(ds.get(1).input.to_vector<uint8_t>(), pattern(4, 6).to_vector<uint8_t>());
  EXPECT_EQ(ds.get(2).label.item<int64_t>(), 1);

  // Undecoded bytes through the pipeline's decode, resized to one shape per batch.
  data::Pipeline p(std::make_shared<data::ImageFolderDataset>(dir.string(), data::ImageFolderOptions{.decode = false}));
  p.map({data::vision::decode(), data::vision::resize(6, 6), data::vision::rescale(1.0 / 255),
         data::vision::hwc_to_chw()})
      .batch(3)
      .num_parallel_workers(2);
  data::Batch b;
  p.start_epoch();
  ASSERT_TRUE(p.next(b));
  EXPECT_EQ(b.inputs.shape(), (Shape{3, 3, 6, 6}));
  EXPECT_EQ(b.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1}));

  write_bytes(dir / "dog" / "d.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0});
  data::ImageFolderDataset with_bad(dir.string());
  auto msg = message_of([&] { with_bad.get(3); });
  EXPECT_NE(msg.find("d.png"), std::string::npos) << msg;
  msg = message_of([&] { data::ImageFolderDataset((dir / "cat").string()); });
  EXPECT_NE(msg.find("has no subfolders"), std::string::npos) << msg;
  fs::remove_all(dir);
}

// With skip_unreadable, a truncated image is replaced by the next one that
// decodes, reported once with the count; without it, it is an error.
TEST(ImageFolder, UnreadableImagesAreSkippedWithACountedWarningWhenAsked) {
  fs::path dir = fresh_dir("skip");
  fs::create_directories(dir / "cat");
  fs::create_directories(dir / "dog");
  auto jpg = data::encode_jpeg(pattern(16, 16));
  write_bytes(dir / "cat" / "a.jpg", std::vector<uint8_t>(jpg.begin(), jpg.begin() + static_cast<long>(jpg.size() / 2)));
  write_bytes(dir / "cat" / "b.png", data::encode_png(pattern(4, 6)));
  write_bytes(dir / "dog" / "c.png", data::encode_png(pattern(5, 5)));
  EXPECT_NE(message_of([&] { data::ImageFolderDataset(dir.string()).get(0); }).find("a.jpg"), std::string::npos);
  data::ImageFolderDataset ds(dir.string(), data::ImageFolderOptions{.skip_unreadable = true});
  ::testing::internal::CaptureStderr();
  data::Sample first = ds.get(0), again = ds.get(0);
  std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(first.input.to_vector<uint8_t>(), pattern(4, 6).to_vector<uint8_t>());  // b.png stands in
  EXPECT_EQ(first.label.item<int64_t>(), 0);
  EXPECT_EQ(ds.skipped(), 1);
  EXPECT_NE(warned.find("skipped an unreadable image (1 so far)"), std::string::npos) << warned;
  EXPECT_NE(warned.find("a.jpg"), std::string::npos) << warned;
  EXPECT_EQ(warned.find("skipped", warned.find("skipped") + 1), std::string::npos) << "reported twice: " << warned;
  EXPECT_EQ(ds.get(2).label.item<int64_t>(), 1);
  EXPECT_NE(message_of([&] { data::ImageFolderDataset(dir.string(), {.decode = false, .skip_unreadable = true}); })
                .find("skip_unreadable needs decode"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Csv, FeaturesAndLabelsWithHeaderQuotesAndClassNames) {
  fs::path dir = fresh_dir("csv");
  std::ofstream(dir / "iris.csv") << "sepal,\"petal, width\",species\n1.5,2,setosa\n\n3,4.25,\"virginica\"\n5,6e-1,setosa\n";
  auto csv = data::load_csv((dir / "iris.csv").string());
  EXPECT_EQ(csv.feature_names, (std::vector<std::string>{"sepal", "petal, width"}));
  EXPECT_EQ(csv.class_names, (std::vector<std::string>{"setosa", "virginica"}));
  EXPECT_EQ(csv.data.inputs.to_vector<float>(), (std::vector<float>{1.5f, 2, 3, 4.25f, 5, 0.6f}));
  EXPECT_EQ(csv.data.labels.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));

  std::ofstream(dir / "num.csv") << "7,1,2\n8,3,4\n";
  auto num = data::load_csv((dir / "num.csv").string(), {.label_column = "c0", .has_header = false});
  EXPECT_EQ(num.data.labels.to_vector<int64_t>(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(num.data.inputs.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));

  std::ofstream(dir / "bad.csv") << "a,b,y\n1,2,0\n1,x,1\n";
  auto msg = message_of([&] { data::load_csv((dir / "bad.csv").string()); });
  EXPECT_NE(msg.find("line 3, column 'b': 'x' is not a number"), std::string::npos) << msg;
  std::ofstream(dir / "short.csv") << "a,b,y\n1,2,0\n1,1\n";
  msg = message_of([&] { data::load_csv((dir / "short.csv").string()); });
  EXPECT_NE(msg.find("line 3 has 2 fields, expected 3"), std::string::npos) << msg;
  msg = message_of([&] { data::load_csv((dir / "iris.csv").string(), {.label_column = "kind"}); });
  EXPECT_NE(msg.find("no column 'kind'; its columns are: sepal, petal, width, species"), std::string::npos) << msg;
  fs::remove_all(dir);
}

TEST(Text, VocabularyWindowsAndShiftedTargets) {
  std::string text = "abracadabra, abracadabra!";
  data::Vocabulary vocab(text);
  EXPECT_EQ(vocab.chars(), " !,abcdr");
  EXPECT_EQ(vocab.decode(vocab.encode(text)), text);
  EXPECT_THROW(vocab.encode("z"), Error);
  auto splits = data::make_text_splits(text, 4, 0.2);
  EXPECT_EQ(splits.train->size(), 4);  // 20 tokens: windows at 0, 4, 8, 12 (+1 target each)
  data::Sample s = splits.train->get(1);
  EXPECT_EQ(vocab.decode(s.input.to_vector<int64_t>()), "cada");
  EXPECT_EQ(vocab.decode(s.label.to_vector<int64_t>()), "adab");
  EXPECT_EQ(splits.validation->size(), 1);  // "abra!" holds one window
  EXPECT_EQ(vocab.decode(splits.validation->get(0).input.to_vector<int64_t>()), "abra");
  auto msg = message_of([&] { data::TextDataset(from_vector<int64_t>({1, 2}), 4); });
  EXPECT_NE(msg.find("too few for one window of 4 tokens"), std::string::npos) << msg;
}

TEST(Text, ReadsTheKingJamesBibleFromDebiansPackage) {
  std::string kjv = data::read_kjv_bible();
  EXPECT_EQ(kjv.size(), 4404412u);
  EXPECT_EQ(kjv.substr(0, 42), "Ge1:1 In the beginning God created the hea");
  EXPECT_EQ(data::Vocabulary(kjv).size(), 73);
}

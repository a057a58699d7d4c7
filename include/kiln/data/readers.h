#pragma once
// Readers for the datasets Kiln trains on. In-memory readers return a
// TensorDataset; readers of files too large to hold decoded read per sample.
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data {

// MNIST-format idx files (gzip-compressed or raw). `split` is "train" or
// "test"; images become float32 [N, 1, 28, 28] in [0, 1], labels int64 [N].
TensorDataset load_mnist(const std::string& dir, const std::string& split);
// Fashion-MNIST from Debian's dataset-fashion-mnist (the default directory).
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
TensorDataset load_fashion_mnist(const std::string& split, const std::string& dir = kFashionMnistDir);
extern const std::vector<std::string> kFashionMnistClasses;
// The class names of a built-in dataset's labels in label order (fashion_mnist,
// mnist, cifar10, as recipes name them); empty for any other.
std::vector<std::string> dataset_class_names(const std::string& dataset);

// CIFAR-10, binary version (data_batch_1.bin ... data_batch_5.bin for
// "train", test_batch.bin for "test"): images uint8 [N, 32, 32, 3] (HWC,
// RGB), labels int64 [N]. Map vision transforms over them with Layout::HWC.
TensorDataset load_cifar10(const std::string& dir, const std::string& split);
extern const std::vector<std::string> kCifar10Classes;

// A folder with one subfolder per class (sorted names give class indices)
// holding .jpg/.jpeg/.png files. Samples are read from disk when asked for:
// input uint8 [H, W, 3] decoded (or the raw file bytes, uint8 [n], with
// decode = false, to decode later with vision::decode()), label int64 [].
struct ImageFolderOptions {
  bool decode = true;
  int channels = 3;
  // An image that does not decode (truncated, corrupt) is replaced by the next
  // one that does, with one line on stderr per file naming it and the count so
  // far; otherwise it is an error naming the file. Needs decode.
  bool skip_unreadable = false;
};
class ImageFolderDataset : public Dataset {
 public:
  explicit ImageFolderDataset(const std::string& root, ImageFolderOptions options = {});
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Sample get(int64_t index) const override;
  const std::vector<std::string>& class_names() const { return classes_; }
  const std::string& path(int64_t index) const { return files_[static_cast<size_t>(index)]; }
  int64_t skipped() const;  // files found unreadable so far (skip_unreadable)

 private:
  ImageFolderOptions options_;
  struct Skipped;
  std::shared_ptr<Skipped> skipped_;
  std::vector<std::string> classes_, files_;
  std::vector<int64_t> labels_;
};

// A CSV file of numeric features and one label column. Labels that are all
// whole numbers stay numbers (int64); any other text becomes a class index
// in sorted order (class_names); with `regression`, labels are float32.
struct CsvOptions {
  std::string label_column;   // a header name; empty: the last column
  bool has_header = true;
  char delimiter = ',';
  bool regression = false;
};
struct CsvData {
  TensorDataset data;                      // inputs float32 [N, F]
  std::vector<std::string> feature_names;  // from the header, or "c0", "c1", ...
  std::vector<std::string> class_names;    // when labels were text
};
CsvData load_csv(const std::string& path, const CsvOptions& options = {});

// Character-level language modelling: bytes of a text become tokens of a
// vocabulary of the distinct bytes (sorted). Sample i is the window of
// seq_len tokens starting at i * stride and, as its label, the same window
// shifted by one token.
class Vocabulary {
 public:
  Vocabulary() = default;
  explicit Vocabulary(const std::string& text);  // the distinct bytes of text
  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  std::vector<int64_t> encode(const std::string& text) const;  // refuses bytes it does not have
  std::string decode(const std::vector<int64_t>& tokens) const;
  const std::string& chars() const { return chars_; }

 private:
  std::string chars_;
  int16_t index_[256];
};

class TextDataset : public Dataset {
 public:
  // tokens: int64 [L]; windows of seq_len + 1 tokens fit in it.
  TextDataset(Tensor tokens, int64_t seq_len, int64_t stride = 0 /* 0: seq_len */);
  int64_t size() const override { return size_; }
  Sample get(int64_t index) const override;
  int64_t seq_len() const { return seq_len_; }

 private:
  Tensor tokens_;
  int64_t seq_len_, stride_, size_;
};

// The text split into a training part (the first 1 - validation_fraction of
// it) and a validation part (the rest), over one vocabulary.
struct TextSplits {
  Vocabulary vocab;
  std::shared_ptr<TextDataset> train, validation;
};
TextSplits make_text_splits(const std::string& text, int64_t seq_len, double validation_fraction = 0.1);

std::string read_text_file(const std::string& path);
// The King James Bible as Debian's bible-kjv prints it (`bible -f 'Gen1:1-Rev22:21'`).
std::string read_kjv_bible();

}  // namespace kiln::data

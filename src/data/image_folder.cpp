#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>

#include "kiln/caller_language.h"
#include "kiln/data/image.h"
#include "kiln/data/readers.h"

namespace kiln::data {
namespace fs = std::filesystem;

namespace {
bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}
}  // namespace

struct ImageFolderDataset::Skipped {
  std::mutex mu;
  std::set<int64_t> indices;
};

ImageFolderDataset::ImageFolderDataset(const std::string& root, ImageFolderOptions options)
    : options_(options), skipped_(std::make_shared<Skipped>()) {
  KILN_CHECK(options.channels == 1 || options.channels == 3, "ImageFolderDataset: channels must be 1 or 3");
  KILN_CHECK(options.decode || !options.skip_unreadable,
             "ImageFolderDataset: skip_unreadable needs decode (raw bytes are decoded later, where they fail)");
  KILN_CHECK(fs::is_directory(root), "ImageFolderDataset: '", root, "' is not a directory");
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  KILN_CHECK(!classes_.empty(), "ImageFolderDataset: '", root,
             "' has no subfolders; put the images of each class in a subfolder named after the class");
  for (size_t c = 0; c < classes_.size(); ++c) {
    std::vector<std::string> found;
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(root) / classes_[c]))
      if (entry.is_regular_file() && is_image_file(entry.path())) found.push_back(entry.path().string());
    std::sort(found.begin(), found.end());
    for (auto& f : found) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int64_t>(c));
    }
  }
  KILN_CHECK(!files_.empty(), "ImageFolderDataset: no .jpg, .jpeg or .png files under '", root, "'");
}

Sample ImageFolderDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "ImageFolderDataset: index ", index, " is out of range for ", size(),
             " images");
  const std::string& path = files_[static_cast<size_t>(index)];
  Tensor label = Tensor::empty({}, DType::Int64);
  *label.data<int64_t>() = labels_[static_cast<size_t>(index)];
  if (options_.decode && options_.skip_unreadable) {
    // The next image that decodes stands in; each bad file is reported once.
    for (int64_t tried = 0; tried < size(); ++tried) {
      int64_t at = (index + tried) % size();
      try {
        Tensor image = read_image(files_[static_cast<size_t>(at)], options_.channels);
        *label.data<int64_t>() = labels_[static_cast<size_t>(at)];
        return {image, label};
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(skipped_->mu);
        if (skipped_->indices.insert(at).second) {
          std::string line = "kiln: skipped an unreadable image (" + std::to_string(skipped_->indices.size()) +
                             " so far): " + e.what() + "\n";
          std::fwrite(line.data(), 1, line.size(), stderr);
        }
      }
    }
    KILN_FAIL("ImageFolderDataset: none of the ", size(), " images decodes");
  }
  if (options_.decode) {
    try {
      return {read_image(path, options_.channels), label};
    } catch (const Error& e) {  // the file is named by the reader; the way past it is said here
      KILN_FAIL(e.what(), "; to skip images that do not decode (each replaced by the next one, with a warning), ",
                in_caller_language("set ImageFolderOptions::skip_unreadable, or skip_bad_images: true in a recipe",
                                   "pass ImageFolderDataset(..., skip_unreadable=True)"));
    }
  }
  std::vector<uint8_t> bytes = read_file_bytes(path);
  Tensor raw = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::UInt8);
  std::memcpy(raw.raw_data(), bytes.data(), bytes.size());
  return {raw, label};
}

int64_t ImageFolderDataset::skipped() const {
  std::lock_guard<std::mutex> lock(skipped_->mu);
  return static_cast<int64_t>(skipped_->indices.size());
}

}  // namespace kiln::data

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kiln/data/readers.h"

namespace kiln::data {

Vocabulary::Vocabulary(const std::string& text) {
  bool seen[256] = {};
  for (unsigned char c : text) seen[c] = true;
  std::fill(std::begin(index_), std::end(index_), int16_t{-1});
  for (int c = 0; c < 256; ++c)
    if (seen[c]) {
      index_[c] = static_cast<int16_t>(chars_.size());
      chars_ += static_cast<char>(c);
    }
}

std::vector<int64_t> Vocabulary::encode(const std::string& text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    int16_t id = index_[static_cast<unsigned char>(text[i])];
    KILN_CHECK(id >= 0, "Vocabulary: byte ", static_cast<int>(static_cast<unsigned char>(text[i])), " at offset ", i,
               " is not in the vocabulary of ", size(), " characters");
    out.push_back(id);
  }
  return out;
}

std::string Vocabulary::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  for (int64_t t : tokens) {
    KILN_CHECK(t >= 0 && t < size(), "Vocabulary: token ", t, " is out of range for ", size(), " characters");
    out += chars_[static_cast<size_t>(t)];
  }
  return out;
}

TextDataset::TextDataset(Tensor tokens, int64_t seq_len, int64_t stride)
    : tokens_(tokens.contiguous()), seq_len_(seq_len), stride_(stride == 0 ? seq_len : stride) {
  KILN_CHECK(tokens_.dtype() == DType::Int64 && tokens_.dim() == 1, "TextDataset: tokens must be int64 [L], got ",
             tokens_.meta_str());
  KILN_CHECK(seq_len > 0 && stride_ > 0, "TextDataset: seq_len and stride must be positive");
  int64_t length = tokens_.shape()[0];
  KILN_CHECK(length >= seq_len + 1, "TextDataset: ", length, " tokens are too few for one window of ", seq_len,
             " tokens and its next-token targets");
  size_ = (length - seq_len - 1) / stride_ + 1;
}

Sample TextDataset::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size_, "TextDataset: index ", index, " is out of range for ", size_, " windows");
  int64_t start = index * stride_;
  return {tokens_.slice(0, start, start + seq_len_), tokens_.slice(0, start + 1, start + seq_len_ + 1)};
}

TextSplits make_text_splits(const std::string& text, int64_t seq_len, double validation_fraction) {
  KILN_CHECK(validation_fraction > 0 && validation_fraction < 1, "validation_fraction must be in (0, 1), got ",
             validation_fraction);
  TextSplits s;
  s.vocab = Vocabulary(text);
  std::vector<int64_t> ids = s.vocab.encode(text);
  int64_t total = static_cast<int64_t>(ids.size());
  int64_t cut = static_cast<int64_t>(static_cast<double>(total) * (1 - validation_fraction));
  Tensor all = from_vector(ids, Shape{total});
  s.train = std::make_shared<TextDataset>(all.slice(0, 0, cut), seq_len);
  s.validation = std::make_shared<TextDataset>(all.slice(0, cut, total), seq_len);
  return s;
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string read_kjv_bible() {
  FILE* p = popen("bible -f 'Gen1:1-Rev22:21' 2>/dev/null", "r");
  KILN_CHECK(p != nullptr, "cannot run the 'bible' program");
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) text.append(buf, n);
  int status = pclose(p);
  KILN_CHECK(status == 0 && text.size() > 1000000, "the King James Bible is not available (the 'bible' program ",
             status == 0 ? "printed too little" : "failed", "); install it with: apt-get install bible-kjv bible-kjv-text");
  return text;
}

}  // namespace kiln::data

#include "kiln/functional.h"
#include "kiln/models.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/layers.h"

namespace kiln::models {
namespace {

using namespace kiln::nn;

std::shared_ptr<Cell> mlp(const ModelConfig& c) {
  auto seq = std::make_shared<SequentialCell>();
  seq->append(std::make_shared<Flatten>());
  int64_t in = c.in_channels * c.image_size * c.image_size;
  for (int64_t h : c.hidden) {
    seq->append(std::make_shared<Dense>(in, h));
    seq->append(std::make_shared<ReLU>());
    in = h;
  }
  seq->append(std::make_shared<Dense>(in, c.num_classes));
  return seq;
}

// W2: conv(32)-ReLU-pool - conv(64)-ReLU-pool - fc(128)-ReLU-fc.
std::shared_ptr<Cell> cnn(const ModelConfig& c) {
  KILN_CHECK(c.image_size % 4 == 0, "cnn needs an image size divisible by 4, got ", c.image_size);
  int64_t s = c.image_size / 4;
  return std::make_shared<SequentialCell>(std::vector<CellPtr>{
      std::make_shared<Conv2d>(c.in_channels, 32, 3, Conv2dOptions{.padding = 1}), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2), std::make_shared<Conv2d>(32, 64, 3, Conv2dOptions{.padding = 1}),
      std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
      std::make_shared<Dense>(64 * s * s, 128), std::make_shared<ReLU>(), std::make_shared<Dense>(128, c.num_classes)});
}

class BasicBlock : public Cell {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_cell("conv1", std::make_shared<Conv2d>(in, out, 3, Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
    bn1 = register_cell("bn1", std::make_shared<BatchNorm2d>(out));
    conv2 = register_cell("conv2", std::make_shared<Conv2d>(out, out, 3, Conv2dOptions{.padding = 1, .bias = false}));
    bn2 = register_cell("bn2", std::make_shared<BatchNorm2d>(out));
    if (stride != 1 || in != out) {
      shortcut = register_cell("shortcut", std::make_shared<SequentialCell>(std::vector<CellPtr>{
                                               std::make_shared<Conv2d>(in, out, 1, Conv2dOptions{.stride = stride, .bias = false}),
                                               std::make_shared<BatchNorm2d>(out)}));
    }
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = relu(bn1->construct(conv1->construct(x)));
    h = bn2->construct(conv2->construct(h));
    return relu(h + (shortcut ? shortcut->construct(x) : x));
  }
  std::string type_name() const override { return "BasicBlock"; }

 private:
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<SequentialCell> shortcut;
};

// ResNet-50's block (torchvision's v1.5: the stride on the 3x3): 1x1 down
// to `width`, 3x3, 1x1 up to 4 * width, each with batch norm, and the input
// added (through a strided 1x1 and batch norm where the shape changes).
class Bottleneck : public Cell {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t width, int64_t stride) {
    const int64_t out = width * kExpansion;
    conv1 = register_cell("conv1", std::make_shared<Conv2d>(in, width, 1, Conv2dOptions{.bias = false}));
    bn1 = register_cell("bn1", std::make_shared<BatchNorm2d>(width));
    conv2 = register_cell("conv2", std::make_shared<Conv2d>(
                                       width, width, 3, Conv2dOptions{.stride = stride, .padding = 1, .bias = false}));
    bn2 = register_cell("bn2", std::make_shared<BatchNorm2d>(width));
    conv3 = register_cell("conv3", std::make_shared<Conv2d>(width, out, 1, Conv2dOptions{.bias = false}));
    bn3 = register_cell("bn3", std::make_shared<BatchNorm2d>(out));
    if (stride != 1 || in != out)
      shortcut = register_cell("shortcut",
                               std::make_shared<SequentialCell>(std::vector<CellPtr>{
                                   std::make_shared<Conv2d>(in, out, 1, Conv2dOptions{.stride = stride, .bias = false}),
                                   std::make_shared<BatchNorm2d>(out)}));
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = relu(bn1->construct(conv1->construct(x)));
    h = relu(bn2->construct(conv2->construct(h)));
    h = bn3->construct(conv3->construct(h));
    return relu(h + (shortcut ? shortcut->construct(x) : x));
  }
  std::string type_name() const override { return "Bottleneck"; }

 private:
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<SequentialCell> shortcut;
};

// ResNet-50 as torchvision builds it: a 7x7 stride-2 stem and a 3x3 max
// pool, stages of 3, 4, 6 and 3 bottlenecks of widths 64 to 512, global
// average pool, fc (25.6M parameters with 1000 classes).
std::shared_ptr<Cell> resnet50(const ModelConfig& c) {
  auto net = std::make_shared<SequentialCell>();
  net->append(std::make_shared<Conv2d>(c.in_channels, 64, 7, Conv2dOptions{.stride = 2, .padding = 3, .bias = false}));
  net->append(std::make_shared<BatchNorm2d>(64));
  net->append(std::make_shared<ReLU>());
  net->append(std::make_shared<MaxPool2d>(3, 2, 1));
  int64_t in = 64;
  const std::pair<int64_t, int64_t> stages[] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (size_t i = 0; i < 4; ++i) {
    auto [width, blocks] = stages[i];
    for (int64_t b = 0; b < blocks; ++b) {
      net->append(std::make_shared<Bottleneck>(in, width, (b == 0 && i > 0) ? 2 : 1));
      in = width * Bottleneck::kExpansion;
    }
  }
  net->append(std::make_shared<AdaptiveAvgPool2d>(1));
  net->append(std::make_shared<Flatten>());
  net->append(std::make_shared<Dense>(in, c.num_classes));
  return net;
}

// A ResNet for small images: 3x3 stem, stages of BasicBlocks, global average pool, fc.
std::shared_ptr<Cell> resnet(const ModelConfig& c, int64_t stem, const std::vector<std::pair<int64_t, int64_t>>& stages) {
  auto net = std::make_shared<SequentialCell>();
  net->append(std::make_shared<Conv2d>(c.in_channels, stem, 3, Conv2dOptions{.padding = 1, .bias = false}));
  net->append(std::make_shared<BatchNorm2d>(stem));
  net->append(std::make_shared<ReLU>());
  int64_t in = stem;
  for (size_t i = 0; i < stages.size(); ++i) {
    auto [width, blocks] = stages[i];
    for (int64_t b = 0; b < blocks; ++b) {
      net->append(std::make_shared<BasicBlock>(in, width, (b == 0 && i > 0) ? 2 : 1));
      in = width;
    }
  }
  net->append(std::make_shared<AdaptiveAvgPool2d>(1));
  net->append(std::make_shared<Flatten>());
  net->append(std::make_shared<Dense>(in, c.num_classes));
  return net;
}

// The zoo's text models: token and learned position embeddings, encoder
// layers under a causal mask, a final LayerNorm, and logits. Input: int64
// [N, T]; output [N, T, vocab].
// - W4 (char_transformer): post-norm ReLU layers and a linear head;
// - GPT-2 (gpt2): pre-norm GELU layers, and logits from the token embedding
//   itself (the weights tied, as GPT-2's are).
class TokenTransformer : public Cell {
 public:
  enum class Kind { CharTransformer, Gpt2 };
  TokenTransformer(const ModelConfig& c, Kind kind) : kind_(kind), seq_len_(c.seq_len) {
    const bool gpt2 = kind == Kind::Gpt2;
    tokens = register_cell("tokens", std::make_shared<Embedding>(c.vocab_size, c.d_model));
    positions = register_cell("positions", std::make_shared<Embedding>(c.seq_len, c.d_model));
    layers = register_cell("layers", std::make_shared<CellList>());
    for (int64_t i = 0; i < c.layers; ++i)
      layers->append(std::make_shared<TransformerEncoderLayer>(
          c.d_model, c.heads,
          TransformerEncoderOptions{
              .dim_feedforward = c.dim_feedforward, .dropout = 0.0, .gelu = gpt2, .norm_first = gpt2}));
    norm = register_cell("norm", std::make_shared<LayerNorm>(Shape{c.d_model}));
    if (!gpt2) head = register_cell("head", std::make_shared<Dense>(c.d_model, c.vocab_size));
    if (gpt2) {  // GPT-2's initialisation of the embeddings: logits from unit-variance ones would start far from chance
      init::normal(tokens->weight, 0.0, 0.02);
      init::normal(positions->weight, 0.0, 0.01);
    }
  }
  Tensor construct(const Tensor& ids) override {
    KILN_CHECK(ids.dim() == 2 && ids.size(1) <= seq_len_, name(), " expects int64 [N, T] with T <= ", seq_len_,
               ", got ", ids.meta_str());
    // The first T rows of the position table: a view whose end follows the
    // length, so a graph of this model is symbolic in T (an arange of T
    // would be a constant of each length's graph).
    Tensor h = tokens->construct(ids) + positions->weight.slice(0, 0, ids.size(1));
    AttentionMasks causal;
    causal.causal = true;
    for (size_t i = 0; i < layers->size(); ++i) h = static_cast<TransformerEncoderLayer&>((*layers)[i]).forward(h, causal);
    h = norm->construct(h);
    return head ? head->construct(h) : matmul(h, tokens->weight.transpose(0, 1));
  }
  std::string type_name() const override { return kind_ == Kind::Gpt2 ? "Gpt2" : "CharTransformer"; }

 private:
  const char* name() const { return kind_ == Kind::Gpt2 ? "gpt2" : "char_transformer"; }
  Kind kind_;
  int64_t seq_len_;
  std::shared_ptr<Embedding> tokens, positions;
  std::shared_ptr<CellList> layers;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dense> head;
};

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "resnet8", "resnet18", "resnet50", "char_transformer",
                                              "gpt2"};
  return names;
}

bool reads_tokens(const std::string& name) { return name == "char_transformer" || name == "gpt2"; }

ModelConfig default_config(const std::string& name) {
  ModelConfig c;
  if (name == "gpt2") {  // GPT-2 small (124M parameters)
    c.vocab_size = 50257;
    c.seq_len = 1024;
    c.d_model = 768;
    c.heads = 12;
    c.layers = 12;
    c.dim_feedforward = 3072;
  }
  return c;
}

std::shared_ptr<nn::Cell> make_model(const std::string& name) { return make_model(name, default_config(name)); }

std::shared_ptr<nn::Cell> make_model(const std::string& name, const ModelConfig& c) {
  if (name == "mlp") return mlp(c);
  if (name == "cnn") return cnn(c);
  if (name == "resnet8") return resnet(c, 16, {{16, 1}, {32, 1}, {64, 1}});
  if (name == "resnet18") return resnet(c, 64, {{64, 2}, {128, 2}, {256, 2}, {512, 2}});
  if (name == "resnet50") return resnet50(c);
  if (name == "char_transformer") return std::make_shared<TokenTransformer>(c, TokenTransformer::Kind::CharTransformer);
  if (name == "gpt2") return std::make_shared<TokenTransformer>(c, TokenTransformer::Kind::Gpt2);
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("unknown model '", name, "'; the zoo has: ", known);
}

}  // namespace kiln::models

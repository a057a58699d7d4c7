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

// W4: token + learned position embeddings, post-norm encoder layers with a
// causal mask, final LayerNorm, linear head. Input: int64 [N, T]; output [N, T, vocab].
class CharTransformer : public Cell {
 public:
  explicit CharTransformer(const ModelConfig& c) : seq_len_(c.seq_len) {
    tokens = register_cell("tokens", std::make_shared<Embedding>(c.vocab_size, c.d_model));
    positions = register_cell("positions", std::make_shared<Embedding>(c.seq_len, c.d_model));
    layers = register_cell("layers", std::make_shared<CellList>());
    for (int64_t i = 0; i < c.layers; ++i)
      layers->append(std::make_shared<TransformerEncoderLayer>(
          c.d_model, c.heads, TransformerEncoderOptions{.dim_feedforward = c.dim_feedforward, .dropout = 0.0}));
    norm = register_cell("norm", std::make_shared<LayerNorm>(Shape{c.d_model}));
    head = register_cell("head", std::make_shared<Dense>(c.d_model, c.vocab_size));
  }
  Tensor construct(const Tensor& ids) override {
    KILN_CHECK(ids.dim() == 2 && ids.size(1) <= seq_len_, "char_transformer expects int64 [N, T] with T <= ", seq_len_,
               ", got ", ids.meta_str());
    // The first T rows of the position table: a view whose end follows the
    // length, so a graph of this model is symbolic in T (an arange of T
    // would be a constant of each length's graph).
    Tensor h = tokens->construct(ids) + positions->weight.slice(0, 0, ids.size(1));
    AttentionMasks causal;
    causal.causal = true;
    for (size_t i = 0; i < layers->size(); ++i) h = static_cast<TransformerEncoderLayer&>((*layers)[i]).forward(h, causal);
    return head->construct(norm->construct(h));
  }
  std::string type_name() const override { return "CharTransformer"; }

 private:
  int64_t seq_len_;
  std::shared_ptr<Embedding> tokens, positions;
  std::shared_ptr<CellList> layers;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Dense> head;
};

}  // namespace

const std::vector<std::string>& model_names() {
  static const std::vector<std::string> names{"mlp", "cnn", "resnet8", "resnet18", "char_transformer"};
  return names;
}

std::shared_ptr<nn::Cell> make_model(const std::string& name, const ModelConfig& c) {
  if (name == "mlp") return mlp(c);
  if (name == "cnn") return cnn(c);
  if (name == "resnet8") return resnet(c, 16, {{16, 1}, {32, 1}, {64, 1}});
  if (name == "resnet18") return resnet(c, 64, {{64, 2}, {128, 2}, {256, 2}, {512, 2}});
  if (name == "char_transformer") return std::make_shared<CharTransformer>(c);
  std::string known;
  for (auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  KILN_FAIL("unknown model '", name, "'; the zoo has: ", known);
}

}  // namespace kiln::models

#pragma once
// The model zoo of the training recipes: mlp (W1), cnn (W2), resnet8 (W3),
// resnet18, resnet50 (torchvision's ResNet-50), char_transformer (W4), gpt2
// (GPT-2's architecture; its default config is GPT-2 small, 124M).
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::models {

struct ModelConfig {
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  int64_t image_size = 28;                      // height = width
  std::vector<int64_t> hidden = {512, 256};     // mlp
  // char_transformer
  int64_t vocab_size = 128, seq_len = 128, d_model = 128, heads = 4, layers = 2, dim_feedforward = 512;
};

// The names make_model accepts.
const std::vector<std::string>& model_names();
// Whether the model reads token ids (int64 [N, T]) rather than images.
bool reads_tokens(const std::string& name);
// The model's own sizes: ModelConfig's defaults, but GPT-2 small's for gpt2.
ModelConfig default_config(const std::string& name);
// Throws listing the known names when `name` is not one of them.
std::shared_ptr<nn::Cell> make_model(const std::string& name);  // with default_config(name)
std::shared_ptr<nn::Cell> make_model(const std::string& name, const ModelConfig& config);

}  // namespace kiln::models

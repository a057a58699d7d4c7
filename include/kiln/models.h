#pragma once
// The model zoo of the training recipes: mlp (W1), cnn (W2), resnet8 (W3),
// resnet18, char_transformer (W4).
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
// Throws listing the known names when `name` is not one of them.
std::shared_ptr<nn::Cell> make_model(const std::string& name, const ModelConfig& config = {});

}  // namespace kiln::models

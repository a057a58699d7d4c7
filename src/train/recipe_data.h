#pragma once
// The data side of a recipe: the batch sources for training, validation and
// test, and the model configuration the data implies (input channels, image
// size, classes, vocabulary).
#include <memory>

#include "kiln/data.h"
#include "kiln/recipe.h"

namespace kiln::recipe::detail {

// This process's share of the data in a data-parallel job: the training
// set's global batches split over the ranks (batch_size / ranks each), the
// evaluation sets split so that every sample is seen once.
struct Shard {
  int64_t rank = 0, ranks = 1;
};

struct RecipeData {
  std::unique_ptr<data::BatchSource> train, validation, test;  // validation may be null
  models::ModelConfig config;
  int64_t seq_len = 0;  // text datasets: tokens per sample
};

// Loads (or opens) the datasets; throws before anything is trained when the
// data is missing, naming the package or the key to set.
RecipeData load_data(const Recipe& r, const Shard& shard = {});

// The recipe's model for its data, quantization-aware when the recipe says so.
std::shared_ptr<nn::Cell> make_model(const Recipe& r, const models::ModelConfig& config);

}  // namespace kiln::recipe::detail

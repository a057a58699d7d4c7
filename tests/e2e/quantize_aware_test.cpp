// Quantization-aware training as a recipe runs it (graph mode, W2 on the
// real Fashion-MNIST, a few hundred steps), then `kiln quantize`'s path: the
// int8 model, on the input ranges the training learned, scores what the
// fake-quantized one did, within 0.3 points.
#include <gtest/gtest.h>

#include <filesystem>

#include "kiln/kiln.h"
#include "kiln/recipe.h"
#include "support/scratch.h"

using namespace kiln;

TEST(QuantizeAware, W2TrainedQuantizationAwareLosesNothingInInt8) {
  ASSERT_TRUE(std::filesystem::exists(data::kFashionMnistDir))
      << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)";
  const std::string out = kiln::testing::scratch_dir("qat_w2").string();
  recipe::Recipe r = recipe::parse_recipe_text("model: cnn\ndataset: fashion_mnist\nmode: graph\nquantize_aware: true\n"
                                               "epochs: 1\nmax_steps: 300\nbatch_size: 64\noutput: " + out + "\n");
  const recipe::RunResult trained = recipe::train(r, false);
  const recipe::QuantizedRecipe q = recipe::quantize(r, out + "/checkpoint.safetensors", {}, 4);
  std::printf("W2, 300 quantization-aware steps: fake-quantized %.2f%%, int8 %.2f%%, float weights %.2f%%\n",
              100 * trained.accuracy, 100 * q.quantized_accuracy, 100 * q.float_accuracy);
  EXPECT_GE(trained.accuracy, 0.8);
  EXPECT_NEAR(q.quantized_accuracy, trained.accuracy, 0.003);
  EXPECT_EQ(q.quantized.report.quantized(), 4);
  // Every quantized layer keeps the input range its training learned, not a recalibrated one.
  EXPECT_EQ(q.quantized.report.learned_input_ranges, 4) << q.quantized.report.str();
}

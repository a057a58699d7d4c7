// Quantization-aware training's pieces: fake quantization rounds onto the
// int8 grid with gradients straight through inside its range; layers made
// quantization-aware watch their inputs' range, and turn back into the
// float model when asked.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/nn/quantize_aware.h"
#include "support/error_message.h"

using namespace kiln;

namespace {

TEST(QuantizeAware, FakeQuantizationRoundsOntoTheGridAndPassesGradientsInsideIt) {
  Tensor x = from_vector<float>({-1.0f, 0.26f, 0.74f, 3.0f, 9.0f}, {5});
  x.set_requires_grad();
  const Tensor scale = scalar_tensor(0.5), zero = scalar_tensor(2.0);  // the grid: 0.5 * (q - 2), q in [0, 15]
  const Tensor y = nn::fake_quantize(x, scale, zero, 0, 15);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-1.0f, 0.5f, 0.5f, 3.0f, 6.5f}));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1, 1, 1, 0}));  // 9.0 lies beyond 6.5
  // Weights: symmetric per output channel, the largest magnitude on 127.
  const Tensor w = from_vector<float>({1.0f, -0.5f, 0.3f, 0.01f, 0.02f, -0.04f}, {2, 3});
  const auto wq = nn::fake_quantize_weights(w).to_vector<float>();
  EXPECT_FLOAT_EQ(wq[0], 1.0f);
  EXPECT_NEAR(wq[2], std::nearbyint(0.3 * 127) / 127, 1e-6);
  EXPECT_NEAR(wq[3], std::nearbyint(0.01 / 0.04 * 127) * 0.04 / 127, 1e-7);
}

TEST(QuantizeAware, LayersWatchTheirInputsAndTurnBackIntoTheFloatModel) {
  manual_seed(0);
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Conv2d>(1, 4, 3), std::make_shared<nn::ReLU>(), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Dense>(4 * 6 * 6, 3)});
  const Tensor x = randn({2, 1, 8, 8});
  net->set_train(false);
  const Tensor float_out = (*net)(x);
  EXPECT_EQ(nn::quantize_aware(*net), 2);
  // The observers are state: saved with the weights.
  size_t observers = 0;
  for (const auto& [name, t] : net->buffers_and_names()) observers += name.find("input_quantizer.running_") != std::string::npos;
  EXPECT_EQ(observers, 4u);
  net->set_train(true);
  (*net)(x);
  const auto& conv_observer = *net->children()[0].second->children()[0].second;
  const Tensor lo = conv_observer.buffers_and_names().at(0).second;
  EXPECT_FLOAT_EQ(lo.item<float>(), amin(x).item<float>());  // the first batch's range as it is
  net->set_train(false);
  const Tensor quantized_out = (*net)(x);
  EXPECT_GT(amax(abs(quantized_out - float_out)).item<float>(), 0.0f);
  EXPECT_LT(amax(abs(quantized_out - float_out)).item<float>(), 0.1f * amax(abs(float_out)).item<float>());
  nn::set_fake_quantization(*net, false);
  EXPECT_EQ((*net)(x).to_vector<float>(), float_out.to_vector<float>());
  auto mlp = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{std::make_shared<nn::ReLU>()});
  EXPECT_NE(kiln::testing::message_of([&] { nn::quantize_aware(*mlp); }).find("no Conv2d or Dense"), std::string::npos);
}

}  // namespace

#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;
namespace vision = kiln::data::vision;

namespace {
Tensor apply(const data::Transform& t, const Tensor& x, uint64_t seed = 0) {
  Generator g(seed);
  return t.apply(x, g);
}
// [1, h, w] float image (CHW) with value y * 10 + x.
Tensor grid(int64_t h, int64_t w) {
  std::vector<float> v;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) v.push_back(static_cast<float>(y * 10 + x));
  return from_vector(v, Shape{1, h, w});
}
}  // namespace

TEST(Vision, ResizeIsBilinearAtPixelCentres) {
  Tensor img = from_vector<float>({0, 10, 20, 30}, Shape{2, 2, 1});
  Tensor up = apply(vision::resize(4, 4), img);
  // As torch.nn.functional.interpolate(mode="bilinear", align_corners=False).
  EXPECT_EQ(up.to_vector<float>(), (std::vector<float>{0, 2.5, 7.5, 10, 5, 7.5, 12.5, 15, 15, 17.5, 22.5, 25, 20,
                                                       22.5, 27.5, 30}));
  Tensor down = apply(vision::resize(1, 1), img);
  EXPECT_FLOAT_EQ(down.item<float>(), 15.0f);
  Tensor bytes = full({5, 7, 3}, 200, DType::UInt8);
  EXPECT_EQ(apply(vision::resize(3, 2), bytes).to_vector<uint8_t>(), std::vector<uint8_t>(18, 200));
}

TEST(Vision, RandomCropWithPaddingIsAShiftedWindow) {
  Tensor img = grid(4, 4);
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Tensor c = apply(vision::random_crop(4, 4, 2, -1, vision::Layout::CHW), img, seed);
    ASSERT_EQ(c.shape(), (Shape{1, 4, 4}));
    auto v = c.to_vector<float>();
    bool found = false;  // some offset in [-2, 2]^2 explains every pixel
    for (int dy = -2; dy <= 2 && !found; ++dy)
      for (int dx = -2; dx <= 2 && !found; ++dx) {
        bool all = true;
        for (int y = 0; y < 4; ++y)
          for (int x = 0; x < 4; ++x) {
            int sy = y + dy, sx = x + dx;
            float want = sy >= 0 && sy < 4 && sx >= 0 && sx < 4 ? static_cast<float>(sy * 10 + sx) : -1.0f;
            all = all && v[static_cast<size_t>(y * 4 + x)] == want;
          }
        found = all;
      }
    EXPECT_TRUE(found) << c.str();
  }
  auto msg = message_of([&] { apply(vision::random_crop(9, 9, 2, 0, vision::Layout::CHW), img); });
  EXPECT_NE(msg.find("does not fit in a 4x4 image padded by 2"), std::string::npos) << msg;
}

TEST(Vision, CenterCropFlipAndChannelOrder) {
  Tensor img = grid(4, 5);
  EXPECT_EQ(apply(vision::center_crop(2, 3, vision::Layout::CHW), img).to_vector<float>(),
            (std::vector<float>{11, 12, 13, 21, 22, 23}));
  Tensor flipped = apply(vision::random_horizontal_flip(1.0, vision::Layout::CHW), img);
  EXPECT_EQ(flipped.to_vector<float>()[0], 4.0f);
  EXPECT_EQ(flipped.to_vector<float>()[4], 0.0f);
  EXPECT_TRUE(apply(vision::random_horizontal_flip(0.0), img).same(img));
  Tensor hwc = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{1, 2, 3});
  EXPECT_EQ(apply(vision::hwc_to_chw(), hwc).to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Vision, RotationKeepsTheCentreAndZeroDegreesIsIdentity) {
  Tensor img = grid(5, 5);
  EXPECT_EQ(apply(vision::random_rotation(0, 0, vision::Layout::CHW), img).to_vector<float>(), img.to_vector<float>());
  int changed = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    auto v = apply(vision::random_rotation(45, -5, vision::Layout::CHW), img, seed).to_vector<float>();
    EXPECT_NEAR(v[12], 22.0f, 1e-4);  // the centre pixel does not move
    changed += v != img.to_vector<float>();
  }
  EXPECT_GE(changed, 4);
}

TEST(Vision, RescaleNormalizeAndTheirErrors) {
  Tensor bytes = from_vector<uint8_t>({0, 255, 51, 102}, Shape{1, 2, 2});
  Tensor f = apply(vision::rescale(1.0 / 255), bytes);
  EXPECT_EQ(f.dtype(), DType::Float32);
  EXPECT_NEAR(f.to_vector<float>()[1], 1.0f, 1e-6);
  Tensor n = apply(vision::normalize({0.5, 0.0}, {0.5, 0.1}), f);  // HWC: 2 channels
  auto v = n.to_vector<float>();
  EXPECT_NEAR(v[0], -1.0f, 1e-6);  // (0 - 0.5) / 0.5
  EXPECT_NEAR(v[1], 10.0f, 1e-5);  // (1 - 0) / 0.1
  auto msg = message_of([&] { apply(vision::normalize({0.5}, {0.5}), bytes); });
  EXPECT_NE(msg.find("put rescale(1.0 / 255) before it"), std::string::npos) << msg;
  msg = message_of([&] { apply(vision::normalize({0.5, 0.5, 0.5}, {1, 1, 1}), f); });
  EXPECT_NE(msg.find("3 means for an image of 2 channels"), std::string::npos) << msg;
}

TEST(Vision, RandomErasingBlanksOneRectangleOfTheRightSize) {
  Tensor img = ones({3, 20, 20});
  int erased_images = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto v = apply(vision::random_erasing(1.0, {0.1, 0.2}, {0.5, 2.0}, 0.0), img, seed).to_vector<float>();
    int64_t zeros = std::count(v.begin(), v.end(), 0.0f);
    if (zeros == 0) continue;
    ++erased_images;
    EXPECT_EQ(zeros % 3, 0);  // the same rectangle in every channel
    double fraction = static_cast<double>(zeros / 3) / 400.0;
    EXPECT_GE(fraction, 0.08);
    EXPECT_LE(fraction, 0.23);
  }
  EXPECT_GE(erased_images, 18);
  EXPECT_TRUE(apply(vision::random_erasing(0.0), img).same(img));
}

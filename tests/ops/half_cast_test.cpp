// Casts between float32 and float16/bfloat16: the vector path of contiguous
// tensors rounds every value as Half's and BFloat16's own conversions do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
// Values that test the rounding: ties both ways, subnormals of both half
// types, overflow past float16's range, signed zeros, inf and NaN; then
// random values, 1037 in all (a vector body and a tail).
std::vector<float> hard_values() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65520.0f, 70000.0f, -1e30f, 5.96e-8f, 2.98e-8f,
                          3e-8f, 6.1e-5f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1e-40f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(), 3.14159265f, 1e-3f};
  Tensor r = randn({1037 - static_cast<int64_t>(v.size())}) * 100.0;
  for (float x : r.to_vector<float>()) v.push_back(x);
  return v;
}

uint16_t bits_of(const Tensor& t, int64_t i) {
  uint16_t b;
  std::memcpy(&b, static_cast<const char*>(t.raw_data()) + 2 * i, 2);
  return b;
}
}  // namespace

TEST(HalfCast, ContiguousCastsRoundAsTheScalarConversions) {
  const std::vector<float> values = hard_values();
  const Tensor x = from_vector(values);
  const Tensor h = cast(x, DType::Float16), b = cast(x, DType::BFloat16);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bits_of(h, static_cast<int64_t>(i)), Half(values[i]).bits) << values[i];
    EXPECT_EQ(bits_of(b, static_cast<int64_t>(i)), BFloat16(values[i]).bits) << values[i];
  }
  // And back: every half value widens exactly.
  const std::vector<float> from_h = cast(h, DType::Float32).to_vector<float>();
  const std::vector<float> from_b = cast(b, DType::Float32).to_vector<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(from_h[i], static_cast<float>(Half(values[i]))) << values[i];
    EXPECT_EQ(from_b[i], static_cast<float>(BFloat16(values[i]))) << values[i];
  }
  // NaN stays NaN both ways.
  const Tensor nan = full({40}, std::nan(""));
  for (DType d : {DType::Float16, DType::BFloat16}) {
    for (float v : cast(cast(nan, d), DType::Float32).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(HalfCast, StridedCastsGiveTheSameValues) {
  const Tensor x = randn({64, 48}) * 10.0;
  for (DType d : {DType::Float16, DType::BFloat16}) {
    const Tensor strided = cast(x.transpose(0, 1), d);
    const Tensor contiguous = cast(x.transpose(0, 1).contiguous(), d);
    EXPECT_EQ(cast(strided, DType::Float32).to_vector<float>(), cast(contiguous, DType::Float32).to_vector<float>());
  }
}

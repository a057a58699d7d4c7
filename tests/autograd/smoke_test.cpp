#include <gtest/gtest.h>

#include "kiln/kiln.h"

TEST(Smoke, AddWorks) {
  auto a = kiln::ones({2, 3});
  auto b = a + a;
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(6, 2.0f));
}

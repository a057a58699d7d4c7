#include <gtest/gtest.h>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Tensor, CreationFillsValues) {
  EXPECT_EQ(zeros({2, 2}).to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(full({3}, 2.5).to_vector<float>(), std::vector<float>(3, 2.5f));
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1.0, 2.0, 0.25).to_vector<float>(), (std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(linspace(0, 1, 5).to_vector<float>(), (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f, 1.0f}));
  EXPECT_EQ(eye(2, 3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(ones({2}, DType::Int32).dtype(), DType::Int32);
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
  EXPECT_EQ(scalar_tensor(3.0).item<double>(), 3.0);
}

TEST(Tensor, RandomIsSeededAndDtypeIndependent) {
  manual_seed(42);
  auto a = randn({100});
  manual_seed(42);
  auto b = randn({100}, DType::Float64);
  EXPECT_EQ(a.to_vector<float>(), b.to(DType::Float32).to_vector<float>());
  Generator g(1);
  auto r = rand({1000}, DType::Float32, &g).to_vector<float>();
  for (float v : r) ASSERT_TRUE(v >= 0.0f && v < 1.0f);
  double m = mean(randn({20000})).item<double>();
  EXPECT_NEAR(m, 0.0, 0.05);
  auto ri = randint(3, 7, {500}).to_vector<int64_t>();
  for (auto v : ri) ASSERT_TRUE(v >= 3 && v < 7);
}

TEST(Tensor, FromVectorAndBufferRoundTrip) {
  std::vector<double> v{1.5, -2, 3};
  auto t = from_vector(v);
  EXPECT_EQ(t.dtype(), DType::Float64);
  EXPECT_EQ(t.to_vector<double>(), v);
  int32_t raw[4] = {1, 2, 3, 4};
  auto b = from_buffer(raw, {2, 2}, DType::Int32);
  raw[0] = 99;  // a copy was taken
  EXPECT_EQ(b.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
}

TEST(Tensor, HalfAndBFloat16Conversions) {
  std::vector<float> vals{0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159f};
  auto h = from_vector(vals).to(DType::Float16).to(DType::Float32).to_vector<float>();
  EXPECT_EQ(h[1], 1.0f);
  EXPECT_EQ(h[2], -2.5f);
  EXPECT_EQ(h[3], 65504.0f);
  EXPECT_NEAR(h[4], 1.19e-7f, 1e-8f);  // subnormal half
  EXPECT_NEAR(h[5], 3.14159f, 2e-3f);
  auto b = from_vector(vals).to(DType::BFloat16).to(DType::Float32).to_vector<float>();
  EXPECT_EQ(b[2], -2.5f);
  EXPECT_NEAR(b[5], 3.14159f, 2e-2f);
  EXPECT_TRUE(std::isinf(static_cast<float>(Half(1e6f))));
}

TEST(Tensor, ViewsShareStorage) {
  auto t = arange(0.0, 12.0, 1.0).reshape({3, 4});
  auto tr = t.transpose(0, 1);
  EXPECT_EQ(tr.shape(), (Shape{4, 3}));
  EXPECT_EQ(tr.strides(), (Strides{1, 4}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.impl().storage, t.impl().storage);
  auto s = t.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(s.offset(), 1);
  auto e = from_vector<float>({1, 2, 3}).reshape({3, 1}).expand({3, 4});
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_EQ(e.contiguous().to_vector<float>()[5], 2.0f);
  EXPECT_EQ(t.unsqueeze(0).shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(t.unsqueeze(0).squeeze().shape(), (Shape{3, 4}));
  EXPECT_EQ(t.flatten().shape(), (Shape{12}));
  EXPECT_EQ(t.permute({1, 0}).contiguous().to_vector<float>(), tr.contiguous().to_vector<float>());
  EXPECT_EQ(t.select(0, -1).to_vector<float>(), (std::vector<float>{8, 9, 10, 11}));
  // Writing through a view changes the base.
  {
    auto col = t.slice(1, 0, 1);
    col.fill_(-1);
  }
  EXPECT_EQ(t.to_vector<float>()[4], -1.0f);
}

TEST(Tensor, ReshapeCopiesOnlyWhenItMust) {
  auto t = arange(0.0, 6.0, 1.0).reshape({2, 3});
  EXPECT_EQ(t.reshape({3, 2}).impl().storage, t.impl().storage);
  auto tr = t.transpose(0, 1);
  auto flat = tr.reshape({6});
  EXPECT_NE(flat.impl().storage, t.impl().storage);
  EXPECT_EQ(flat.to_vector<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(tr.view({6}), Error);
  EXPECT_EQ(t.reshape({-1, 2}).shape(), (Shape{3, 2}));
}

TEST(Tensor, BroadcastingArithmetic) {
  auto a = arange(0.0, 6.0, 1.0).reshape({2, 3});
  auto b = from_vector<float>({10, 20, 30});
  EXPECT_EQ((a + b).to_vector<float>(), (std::vector<float>{10, 21, 32, 13, 24, 35}));
  auto col = from_vector<float>({1, 2}).reshape({2, 1});
  EXPECT_EQ((a * col).to_vector<float>(), (std::vector<float>{0, 1, 2, 6, 8, 10}));
  // Strided and broadcast operands together.
  auto at = a.transpose(0, 1);  // [3, 2]
  EXPECT_EQ((at - col.reshape({2})).to_vector<float>(), (std::vector<float>{-1, 1, 0, 2, 1, 3}));
  EXPECT_EQ((a + 1.0).dtype(), DType::Float32);
  EXPECT_EQ((arange(3) * 2.0).to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ((arange(3) * 0.5).dtype(), DType::Float32);
  EXPECT_EQ((arange(3) + from_vector<float>({0.5f, 0.5f, 0.5f})).dtype(), DType::Float32);
}

TEST(Tensor, PrintsLikeAnArray) {
  auto t = from_vector<float>({1, 2.5, -3, 4}, {2, 2});
  EXPECT_EQ(t.str(), "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], dtype=float32, shape=[2, 2])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2], dtype=int64, shape=[3])");
  EXPECT_NE(arange(5000).str().find("..."), std::string::npos);
  EXPECT_EQ(scalar_tensor(1, DType::Bool).str(), "tensor(true, dtype=bool, shape=[])");
}

TEST(Tensor, InPlaceOpsBumpTheVersion) {
  auto t = zeros({3});
  uint32_t v = t.impl().storage->version;
  t.add_(ones({3}), 2.0);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 2.0f));
  t.mul_(0.5);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_GT(t.impl().storage->version, v);
}

TEST(Tensor, CopyFromAnOverlappingViewReadsTheOldValues) {
  auto t = arange(0.0, 4.0, 1.0).reshape({2, 2});
  t.copy_(t.t());
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 2, 1, 3}));
}

TEST(Allocator, ReusesFreedBlocks) {
  { auto warm = Tensor::empty({1 << 16}); }
  auto before = cpu_allocator_stats();
  for (int i = 0; i < 10; ++i) auto t = Tensor::empty({1 << 16});
  auto after = cpu_allocator_stats();
  EXPECT_EQ(after.system_allocations, before.system_allocations);
  EXPECT_GE(after.reuses - before.reuses, 10);
  auto t = Tensor::empty({1000});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
}

TEST(Parallel, ThreadCountIsConfigurable) {
  int before = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  auto a = randn({1 << 18});
  auto single = sum(a * a).item<double>();
  set_num_threads(2);
  auto multi = sum(a * a).item<double>();
  EXPECT_NEAR(single, multi, 1e-6 * std::abs(single));
  set_num_threads(before);
  EXPECT_THROW(set_num_threads(0), Error);
}

// Shapes come from files and requests: a count that does not fit in 64 bits
// is an error naming the shape, never a wrapped-around small number.
TEST(Shape, ElementCountsThatOverflowAreErrors) {
  const int64_t big = int64_t{1} << 60;
  EXPECT_EQ(numel_of({2, 3, 4}), 24);
  EXPECT_EQ(numel_of({big, 0}), 0);
  EXPECT_EQ(checked_numel({big, 1, 28, 28}), -1);
  EXPECT_EQ(checked_numel({big, 0, 28}), 0);
  EXPECT_EQ(checked_numel({4, -1}), -1);
  EXPECT_EQ(checked_numel({1024, 1024}, 1000), -1);
  EXPECT_EQ(checked_numel({1000}, 1000), 1000);
  try {
    numel_of({big, 1, 28, 28});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[1152921504606846976, 1, 28, 28] has more elements than"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Tensor::empty({big, 1, 28, 28}), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 62, 4}, DType::Float64), Error);  // the bytes overflow
  EXPECT_THROW(zeros({big, 16}), Error);
}

// Creation and random numbers on the tensor's device, from a counter-based
// generator: one seed gives the same numbers, and the same dropout masks,
// on every backend, so a run can move between devices and keep them.
#include <gtest/gtest.h>

#include <set>

#include "core/philox.h"
#include "kiln/backend.h"
#include "kiln/functional.h"
#include "kiln/generator.h"
#include "kiln/profiler.h"
#include "kiln/registry.h"

namespace kiln::testing {
namespace {

const Device kRef{DeviceType::Reference, 0};

TEST(Philox, MatchesTheKnownAnswerOfPhilox4x32With10Rounds) {
  // Random123's known-answer test: counter 0, key 0.
  const philox::Block b = philox::block(0, 0);
  EXPECT_EQ(b.w[0], 0x6627e8d5u);
  EXPECT_EQ(b.w[1], 0xe169c58du);
  EXPECT_EQ(b.w[2], 0xbc57ac4cu);
  EXPECT_EQ(b.w[3], 0x9b00dbd8u);
}

TEST(Generator, ADrawTakesItsCountersAndTheStateIsSeedAndOffset) {
  Generator g(7);
  EXPECT_EQ(g.take(5), 0u);  // five numbers: three counters
  EXPECT_EQ(g.offset(), 3u);
  const uint64_t a = g.next(), b = g.next();
  EXPECT_NE(a, b);
  Generator h(0);
  h.set_state(7, 3);
  EXPECT_EQ(h.next(), a);
  EXPECT_EQ(h.next(), b);
  h.seed(7);
  EXPECT_EQ(h.offset(), 0u);
}

TEST(RandomDevices, OneSeedGivesTheSameNumbersOnEveryBackend) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    manual_seed(11);
    Tensor u = rand({257}, dtype), n = randn({3, 5}, dtype);
    manual_seed(11);
    Tensor ur = rand({257}, dtype, nullptr, kRef), nr = randn({3, 5}, dtype, nullptr, kRef);
    EXPECT_EQ(ur.device(), kRef);
    EXPECT_EQ(u.to_vector<double>(), ur.to_vector<double>()) << dtype_name(dtype);
    EXPECT_EQ(n.to_vector<double>(), nr.to_vector<double>()) << dtype_name(dtype);
  }
  // Integers too, in any dtype, and in range.
  for (DType dtype : {DType::Int64, DType::Int32, DType::Float32}) {
    Generator g(5), h(5);
    Tensor i = randint(-3, 9, {2, 129}, dtype, &g), ir = randint(-3, 9, {2, 129}, dtype, &h, kRef);
    EXPECT_EQ(ir.device(), kRef);
    EXPECT_EQ(i.to(DType::Float64).to_vector<double>(), ir.to(cpu_device()).to(DType::Float64).to_vector<double>());
    std::set<double> seen;
    for (double v : i.to(DType::Float64).to_vector<double>()) seen.insert(v);
    EXPECT_EQ(seen.size(), 12u) << "every value of [-3, 9) drawn, none outside";
    EXPECT_EQ(*seen.begin(), -3);
    EXPECT_EQ(*seen.rbegin(), 8);
  }
  // Uniform in [0, 1), normal with mean 0 and variance 1.
  manual_seed(3);
  std::vector<double> u = rand({20000}, DType::Float64).to_vector<double>(), z = randn({20000}, DType::Float64).to_vector<double>();
  double mean_u = 0, mean_z = 0, var_z = 0;
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
    mean_u += v / 20000;
  }
  for (double v : z) mean_z += v / 20000;
  for (double v : z) var_z += (v - mean_z) * (v - mean_z) / 20000;
  EXPECT_NEAR(mean_u, 0.5, 0.01);
  EXPECT_NEAR(mean_z, 0.0, 0.03);
  EXPECT_NEAR(var_z, 1.0, 0.04);
}

TEST(RandomDevices, CreationHappensOnTheDeviceWithNoTransfer) {
  profiler::start();
  Tensor z = zeros({4, 3}, DType::Float32, kRef), f = full({2}, 2.5, DType::Float64, kRef);
  Tensor r = arange(0.0, 3.0, 0.5, DType::Float32, kRef), o = ones_like(z);
  Tensor e = eye(3, 4, DType::Float64, kRef), l = linspace(0, 1, 4, DType::Float32, kRef);
  profiler::stop();
  for (const auto& rec : profiler::records()) EXPECT_NE(rec.name, "to_device") << "creation went through the host";
  EXPECT_EQ(o.device(), kRef);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, 2.5}));
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(o.to_vector<float>(), std::vector<float>(12, 1.0f));
  EXPECT_EQ(e.to_vector<double>(), (std::vector<double>{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(l.to_vector<float>(), (std::vector<float>{0, 1.0f / 3, 2.0f / 3, 1}));
  EXPECT_EQ(eye(4, 2, DType::Float32, kRef).to_vector<float>(), (std::vector<float>{1, 0, 0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(linspace(2, 5, 1, DType::Float32, kRef).to_vector<float>(), std::vector<float>{2});
  EXPECT_EQ(linspace(2, 5, 0, DType::Float32, kRef).numel(), 0);
}

// Both outputs of dropout: y and its mask.
std::vector<Tensor> dropped(const Tensor& x, double p) {
  return call(OpRegistry::instance().get("dropout"), {x}, {{"p", p}, {"training", true}});
}

TEST(RandomDevices, DropoutMasksAreTheSameOnEveryBackendSoARunCanMove) {
  Tensor x = randn({6, 37});
  manual_seed(21);
  std::vector<Tensor> first = dropped(x, 0.3), second = dropped(x, 0.3);
  // The same run, its second step moved to the reference backend (its own dropout kernel).
  manual_seed(21);
  std::vector<Tensor> first_again = dropped(x, 0.3), moved = dropped(x.to(kRef), 0.3);
  ASSERT_EQ(moved[0].device(), kRef);
  EXPECT_EQ(first[1].to_vector<float>(), first_again[1].to_vector<float>());
  EXPECT_EQ(second[1].to_vector<float>(), moved[1].to_vector<float>());
  EXPECT_EQ(second[0].to_vector<float>(), moved[0].to_vector<float>());
  EXPECT_NE(first[1].to_vector<float>(), second[1].to_vector<float>());  // each step draws anew
  // About 30% dropped.
  int zeros = 0;
  for (float m : second[1].to_vector<float>()) zeros += m == 0.0f;
  EXPECT_NEAR(zeros / (6.0 * 37.0), 0.3, 0.08);
}

}  // namespace
}  // namespace kiln::testing

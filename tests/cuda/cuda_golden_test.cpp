// Every golden case on the GPU: with its inputs on CUDA, each op gives
// PyTorch's values there and PyTorch's input gradients, and an op whose
// CUDA kernel is registered for the case's dtype (and turns no call away)
// runs it on the GPU, not on the CPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include "cuda/gpus.h"
#include "kiln/backend.h"
#include "ops/golden_cases.h"

namespace kiln::testing {
namespace {

Device cuda() { return parse_device("cuda"); }

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

// Whether the CUDA backend must run this case itself: it registered a kernel
// for the case's dtype that takes every call.
bool runs_on_the_gpu(const GoldenCase& c) {
  const Kernel& k =
      OpRegistry::instance().get(c.op).kernels[static_cast<int>(DeviceType::CUDA)][static_cast<int>(c.dtype)];
  return k.fn != nullptr && k.accepts == nullptr && k.input_dtypes.empty();
}

class OnCuda : public ::testing::TestWithParam<int> {};
class GradientOnCuda : public ::testing::TestWithParam<int> {};

TEST_P(OnCuda, MatchesPyTorch) {
  NEEDS_A_GPU();
  const GoldenCase& c = golden_cases()[GetParam()];
  const int64_t before = fallback_count();
  const std::string diff = forward_mismatch_on(c, cuda());
  EXPECT_TRUE(diff.empty()) << c.name << " on CUDA:\n" << diff;
  if (runs_on_the_gpu(c)) {
    EXPECT_EQ(fallback_count(), before) << c.name << " has a CUDA kernel but ran on the CPU";
  }
}

TEST_P(GradientOnCuda, MatchesPyTorch) {
  NEEDS_A_GPU();
  const GoldenCase& c = golden_cases()[GetParam()];
  const std::string diff = gradient_mismatch_on(c, cuda());
  EXPECT_TRUE(diff.empty()) << c.name << " on CUDA:\n" << diff;
}

INSTANTIATE_TEST_SUITE_P(Registry, OnCuda, ::testing::ValuesIn(golden_case_indices()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, GradientOnCuda, ::testing::ValuesIn(golden_case_indices(true)), case_name);

}  // namespace
}  // namespace kiln::testing

// Every golden case on the GPU: with its inputs on CUDA, each op gives
// PyTorch's values there and PyTorch's input gradients, and an op whose
// CUDA kernel is registered for the case's dtype (and turns no call away)
// runs it on the GPU, not on the CPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <map>

#include "cuda/gpus.h"
#include "kiln/backend.h"
#include "ops/golden_cases.h"

namespace kiln::testing {
namespace {

Device cuda() { return parse_device("cuda"); }

std::vector<int> all_cases() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) idx.push_back(static_cast<int>(i));
  return idx;
}
std::vector<int> cases_with_gradients() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i)
    if (!golden_cases()[i].grads.empty()) idx.push_back(static_cast<int>(i));
  return idx;
}
std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

std::vector<Tensor> on_cuda(const GoldenCase& c) {
  std::vector<Tensor> inputs = c.make_inputs();
  for (Tensor& t : inputs)
    if (t.defined()) t = t.to(cuda());
  return inputs;
}

// Whether the CUDA backend must run this case itself: it registered a kernel
// for the case's dtype that takes every call.
bool runs_on_the_gpu(const GoldenCase& c) {
  const Kernel& k = OpRegistry::instance().get(c.op).kernels[static_cast<int>(DeviceType::CUDA)][static_cast<int>(c.dtype)];
  return k.fn != nullptr && k.accepts == nullptr && k.input_dtypes.empty();
}

class OnCuda : public ::testing::TestWithParam<int> {};
class GradientOnCuda : public ::testing::TestWithParam<int> {};

TEST_P(OnCuda, MatchesPyTorch) {
  NEEDS_A_GPU();
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = on_cuda(c);
  const int64_t before = fallback_count();
  std::vector<Tensor> out = call(c.op, inputs, c.attrs);
  const int64_t fell_back = fallback_count() - before;
  if (out.empty()) out.push_back(inputs[0]);  // ops that write their input (assign)
  ASSERT_GE(out.size(), c.outputs.size());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    EXPECT_EQ(out[i].device(), cuda()) << c.name << " output " << i << " left the GPU";
    const std::string diff =
        compare(out[i].to(cpu_device()), c.outputs[i].values, c.outputs[i].shape, forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " output " << i << " on CUDA:\n" << diff;
  }
  if (runs_on_the_gpu(c)) {
    EXPECT_EQ(fell_back, 0) << c.name << " has a CUDA kernel but ran on the CPU";
  }
}

TEST_P(GradientOnCuda, MatchesPyTorch) {
  NEEDS_A_GPU();
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = on_cuda(c);
  for (auto& [k, _] : c.grads) inputs[static_cast<size_t>(k)].set_requires_grad(true);
  Tensor y = call(c.op, inputs, c.attrs)[0];
  sum(y * c.upstream.to_tensor(y.dtype()).to(cuda())).backward();
  for (auto& [k, expected] : c.grads) {
    const Tensor g = inputs[static_cast<size_t>(k)].grad();
    ASSERT_TRUE(g.defined()) << "no gradient reached input " << k;
    EXPECT_EQ(g.device(), cuda()) << c.name << " gradient of input " << k << " left the GPU";
    const std::string diff =
        compare(g.to(cpu_device()), expected.values, expected.shape, gradient_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " gradient of input " << k << " on CUDA:\n" << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OnCuda, ::testing::ValuesIn(all_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, GradientOnCuda, ::testing::ValuesIn(cases_with_gradients()), case_name);

}  // namespace
}  // namespace kiln::testing

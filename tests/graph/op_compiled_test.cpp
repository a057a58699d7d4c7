// Graph mode on every op and backend: each golden case runs as a compiled
// one-op function (traced, through every pass, on the executor's arena) with
// all its inputs as graph inputs, and must give PyTorch's values, as eager
// does in the op suite: on the CPU, and on the reference backend (its arena
// in its memory, its kernels, the CPU's where it has none). Ops that write
// their inputs in place (assign, optimizer updates) and random ops have no
// such case. Ops with an elementwise formula also run fused with the
// arithmetic after them.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "ops/golden_cases.h"

namespace kiln::testing {
namespace {

std::vector<int> compiled_cases() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) {
    const GoldenCase& c = golden_cases()[i];
    const OpDef& op = OpRegistry::instance().get(c.op);
    if (!op.writes.empty() || op.writes_of || op.has_tag(kTagRandom) || c.outputs.empty()) continue;
    idx.push_back(static_cast<int>(i));
  }
  return idx;
}

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

// Runs case c compiled with its inputs on `device`.
void check_compiled(const GoldenCase& c, Device device) {
  std::vector<Tensor> inputs = c.make_inputs();
  for (Tensor& t : inputs)
    if (t.defined()) t = t.to(device);
  // Omitted optional inputs stay omitted: the function fills them in.
  std::vector<int> present;
  std::vector<Tensor> given;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) {
      present.push_back(static_cast<int>(i));
      given.push_back(inputs[i]);
    }
  const size_t arity = inputs.size();
  auto one_op = [&c, present, arity](const std::vector<Tensor>& in) {
    std::vector<Tensor> all(arity);
    for (size_t k = 0; k < present.size(); ++k) all[present[k]] = in[k];
    return call(c.op, all, c.attrs);
  };
  jit::CompileOptions options;
  options.recompile = jit::RecompilePolicy::Silent;
  auto fn = jit::compile(one_op, given, options);
  std::vector<Tensor> out = fn(given);
  ASSERT_GE(out.size(), c.outputs.size()) << c.op << " returned too few outputs compiled";
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    EXPECT_EQ(out[i].device(), device) << c.name << " output " << i;
    std::string diff = compare(out[i].to(cpu_device()), c.outputs[i].values, c.outputs[i].shape, forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " output " << i << " in graph mode on " << device.str() << ":\n"
                              << diff << "\n" << fn.graph_text();
  }
}

class OpCompiled : public ::testing::TestWithParam<int> {};
TEST_P(OpCompiled, MatchesPyTorch) { check_compiled(golden_cases()[GetParam()], cpu_device()); }

class OpCompiledOnReference : public ::testing::TestWithParam<int> {};
TEST_P(OpCompiledOnReference, MatchesPyTorch) {
  check_compiled(golden_cases()[GetParam()], Device{DeviceType::Reference, 0});
}

// Ops with an elementwise formula, in float32, fused with arithmetic after
// them: 2 * op(...) + 0.5 runs as one loop and gives PyTorch's values.
std::vector<int> fusible_cases() {
  std::vector<int> idx;
  for (int i : compiled_cases()) {
    const GoldenCase& c = golden_cases()[i];
    const OpDef& op = OpRegistry::instance().get(c.op);
    bool all_full = true;
    for (const Tensor& t : c.make_inputs()) all_full = all_full && t.defined();
    if (op.math && op.has_tag(kTagFusible) && c.dtype == DType::Float32 && all_full) idx.push_back(i);
  }
  return idx;
}

class OpFused : public ::testing::TestWithParam<int> {};

TEST_P(OpFused, MatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = c.make_inputs();
  auto chain = [&c](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{call(c.op, in, c.attrs)[0] * scalar_tensor(2.0) + scalar_tensor(0.5)};
  };
  auto fn = jit::compile(chain, inputs);
  EXPECT_NE(fn.graph_text().find("fused(" + c.op + ", mul, add)"), std::string::npos) << fn.graph_text();
  std::vector<double> want = c.outputs[0].values;
  for (double& v : want) v = 2 * v + 0.5;
  std::string diff = compare(fn(inputs)[0], want, c.outputs[0].shape, forward_tolerance(c.dtype));
  EXPECT_TRUE(diff.empty()) << c.name << " fused:\n" << diff;
}

INSTANTIATE_TEST_SUITE_P(Registry, OpCompiled, ::testing::ValuesIn(compiled_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, OpCompiledOnReference, ::testing::ValuesIn(compiled_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, OpFused, ::testing::ValuesIn(fusible_cases()), case_name);

}  // namespace
}  // namespace kiln::testing

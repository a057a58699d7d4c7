// The generic op suite: every golden case (one per op, case and registered
// dtype) is checked for forward values against PyTorch, for `infer` against the
// real outputs, for input gradients against PyTorch, and in float64 for
// gradients against finite differences. A coverage test makes sure no
// registered (op, dtype) escapes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "ops/elementwise_formulas.h"
#include "ops/golden_cases.h"

namespace kiln::testing {
namespace {

std::vector<TensorMeta> metas_of(const std::vector<Tensor>& inputs) {
  std::vector<TensorMeta> metas;
  for (auto& t : inputs) {
    if (t.defined()) metas.push_back({true, t.shape(), t.dtype(), t.device()});
    else metas.push_back({false, {}, DType::Float32, {}});
  }
  return metas;
}

// Finite differences need the objective in float64: a cast to float32 would
// drown the perturbation in rounding.
DType output_dtype(const GoldenCase& c) {
  auto out = OpRegistry::instance().get(c.op).infer(metas_of(c.make_inputs()), c.attrs);
  return out.empty() ? c.dtype : out[0].dtype;
}

std::vector<int> golden_indices(bool with_grads, bool float64_only) {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) {
    const GoldenCase& c = golden_cases()[i];
    if (with_grads && c.grads.empty()) continue;
    if (float64_only && (c.dtype != DType::Float64 || output_dtype(c) != DType::Float64)) continue;
    idx.push_back(static_cast<int>(i));
  }
  return idx;
}

// The same values laid out non-contiguously: matrices transposed in memory,
// vectors with a stride of 2.
Tensor non_contiguous(const Tensor& t) {
  NoGradGuard guard;
  if (t.dim() >= 2) return t.transpose(-1, -2).contiguous().transpose(-1, -2);
  if (t.dim() == 1) return stack({t, t}, 1).select(1, 0);
  return t;
}

// Cases with at least one input that a non-contiguous layout can hold.
std::vector<int> strided_indices() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) {
    for (const Tensor& t : golden_cases()[i].make_inputs()) {
      if (t.defined() && !non_contiguous(t).is_contiguous()) {
        idx.push_back(static_cast<int>(i));
        break;
      }
    }
  }
  return idx;
}

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

// Outputs of an op call; for ops with no outputs (assign) the written input.
std::vector<Tensor> run_case(const GoldenCase& c, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> out = call(c.op, inputs, c.attrs);
  if (out.empty()) out.push_back(inputs[0]);
  return out;
}

class OpGolden : public ::testing::TestWithParam<int> {};

TEST_P(OpGolden, ForwardMatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> out = run_case(c, c.make_inputs());
  ASSERT_GE(out.size(), c.outputs.size()) << c.op << " returned too few outputs";
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    std::string diff = compare(out[i], c.outputs[i].values, c.outputs[i].shape, forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " output " << i << ":\n" << diff;
  }
}

class OpStrided : public ::testing::TestWithParam<int> {};

TEST_P(OpStrided, NonContiguousInputsGiveTheSameResult) {
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = c.make_inputs();
  for (auto& t : inputs)
    if (t.defined()) t = non_contiguous(t);
  if (c.op == "view") {
    // A view must not copy: strides that do not allow one are an error.
    EXPECT_THROW(run_case(c, inputs), Error);
    return;
  }
  std::vector<Tensor> out = run_case(c, inputs);
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    std::string diff = compare(out[i], c.outputs[i].values, c.outputs[i].shape, forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " output " << i << " with non-contiguous inputs:\n" << diff;
  }
}

TEST_P(OpGolden, InferMatchesOutputs) {
  const GoldenCase& c = golden_cases()[GetParam()];
  const OpDef& op = OpRegistry::instance().get(c.op);
  std::vector<Tensor> inputs = c.make_inputs();
  std::vector<TensorMeta> inferred = op.infer(metas_of(inputs), c.attrs);
  std::vector<Tensor> out = call(op, inputs, c.attrs);
  ASSERT_EQ(inferred.size(), out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(inferred[i].shape, out[i].shape()) << "output " << i;
    EXPECT_EQ(inferred[i].dtype, out[i].dtype()) << "output " << i;
  }
}

// sum(outputs[0] * upstream), differentiated with Kiln's autograd.
std::map<int, Tensor> kiln_gradients(const GoldenCase& c, std::vector<Tensor> inputs) {
  for (auto& [k, _] : c.grads) inputs[k].set_requires_grad(true);
  Tensor y = call(c.op, inputs, c.attrs)[0];
  Tensor loss = sum(y * c.upstream.to_tensor(y.dtype()));
  loss.backward();
  std::map<int, Tensor> grads;
  for (auto& [k, _] : c.grads) grads[k] = inputs[k].grad();
  return grads;
}

class OpGradient : public ::testing::TestWithParam<int> {};
class OpFiniteDifference : public ::testing::TestWithParam<int> {};

TEST_P(OpGradient, MatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  auto grads = kiln_gradients(c, c.make_inputs());
  for (auto& [k, expected] : c.grads) {
    ASSERT_TRUE(grads[k].defined()) << "no gradient reached input " << k;
    std::string diff = compare(grads[k], expected.values, expected.shape, gradient_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " gradient of input " << k << ":\n" << diff;
  }
}

TEST_P(OpFiniteDifference, MatchesAutograd) {
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = c.make_inputs();
  auto analytic = kiln_gradients(c, inputs);
  Tensor up = c.upstream.to_tensor(DType::Float64);
  auto objective = [&](const std::vector<Tensor>& ins) {
    NoGradGuard guard;
    return sum(call(c.op, ins, c.attrs)[0] * up).item<double>();
  };
  const double eps = 1e-6;
  for (auto& [k, _] : c.grads) {
    std::vector<double> base = inputs[k].to_vector<double>();
    std::vector<double> numeric(base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      std::vector<Tensor> ins = inputs;
      std::vector<double> v = base;
      v[i] = base[i] + eps;
      ins[k] = from_vector<double>(v, inputs[k].shape());
      double plus = objective(ins);
      v[i] = base[i] - eps;
      ins[k] = from_vector<double>(v, inputs[k].shape());
      numeric[i] = (plus - objective(ins)) / (2 * eps);
    }
    std::string diff = compare(analytic[k], numeric, inputs[k].shape(), {1e-5, 1e-6});
    EXPECT_TRUE(diff.empty()) << c.name << " input " << k << " (analytic vs numeric):\n" << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OpGolden, ::testing::ValuesIn(golden_indices(false, false)), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, OpStrided, ::testing::ValuesIn(strided_indices()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, OpGradient, ::testing::ValuesIn(golden_indices(true, false)), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, OpFiniteDifference, ::testing::ValuesIn(golden_indices(true, true)), case_name);

std::set<std::pair<std::string, DType>>* g_seen = nullptr;
void observe(const OpDef& op, const std::vector<Tensor>& inputs) {
  if (g_seen && static_cast<size_t>(op.dispatch_input) < inputs.size() && inputs[op.dispatch_input].defined())
    g_seen->insert({op.name, inputs[op.dispatch_input].dtype()});
}

TEST(OpCoverage, EveryRegisteredOpAndDtypeIsTested) {
  // Forward ops need a golden case per dtype; backward ops must be reached
  // by the gradient checks of the cases in that dtype.
  std::set<std::pair<std::string, DType>> golden, seen;
  for (auto& c : golden_cases()) golden.insert({c.op, c.dtype});
  g_seen = &seen;
  set_dispatch_observer(observe);
  for (auto& c : golden_cases())
    if (!c.grads.empty()) kiln_gradients(c, c.make_inputs());
  set_dispatch_observer(nullptr);
  g_seen = nullptr;
  std::vector<std::string> missing;
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (op->has_tag(kTagRandom)) continue;  // property tests in random_ops_test.cpp
    if (op->has_tag(kTagTransfer)) continue;  // moves between backends: reference_backend_test.cpp
    if (op->has_tag(kTagCollective)) continue;  // needs other ranks: tests/train/data_parallel_test.cpp
    // Fused optimizer updates, one parameter's or a group's: checked against PyTorch's formulas and
    // each other in tests/optim/fused_update_test.cpp.
    const auto ends_with = [&](const std::string& tail) {
      return op->name.size() > tail.size() && op->name.compare(op->name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (ends_with("_update") || ends_with("_update_many")) continue;
    // Quantized operands with float scales (mixed dtypes): checked against exact integer arithmetic in
    // tests/deploy/int8_kernels_test.cpp and dynamic_quantization_test.cpp (and ONNX's
    // DynamicQuantizeLinear conformance cases).
    if (op->name.rfind("qlinear_", 0) == 0 || op->name == "quantize_linear" || op->name == "dequantize_linear" ||
        op->name == "matmul_integer_to_float" || op->name == "dynamic_quantize_linear")
      continue;
    // Packed 2-, 4- and 8-bit codes (uint8) with float scales: checked against their definition in
    // tests/deploy/nbits_matmul_test.cpp, and ONNX Runtime's answers in the contrib_matmul_nbits fixtures.
    if (op->name == "matmul_nbits") continue;
    for (DType d : op->dtypes(DeviceType::CPU)) {
      bool ok = op->has_tag(kTagBackward) ? seen.count({op->name, d}) > 0 : golden.count({op->name, d}) > 0;
      if (!ok) missing.push_back(op->name + "/" + dtype_name(d));
    }
  }
  std::string list;
  for (auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << missing.size() << " registered (op, dtype) pairs have no test; add cases to "
                               << "tests/golden/make_op_golden.py and rerun it:" << list;
}

TEST(OpCoverage, EveryDifferentiableForwardOpHasAGradientCase) {
  std::set<std::string> with_grads;
  for (auto& c : golden_cases())
    if (!c.grads.empty()) with_grads.insert(c.op);
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (!op->differentiable() || op->has_tag(kTagBackward) || op->has_tag(kTagRandom) || op->has_tag(kTagTransfer) ||
        op->has_tag(kTagCollective))
      continue;
    EXPECT_TRUE(with_grads.count(op->name)) << op->name << " is differentiable but no case checks its gradient";
  }
}

// A device backend compiles each op's formula into kernels of its own from
// KILN_FORMULAS: every formula must be there, under its functor's name.
TEST(OpCoverage, EveryElementwiseFormulaIsListedForDeviceBackends) {
  std::set<std::string> listed;
#define KILN_LIST_FORMULA(F)                                                                         \
  EXPECT_STREQ(formulas::F::kName, #F) << "a functor derived from another needs a kName of its own"; \
  listed.insert(#F);
  KILN_FORMULAS(KILN_LIST_FORMULA)
#undef KILN_LIST_FORMULA
  int ops_with_math = 0;
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (!op->math || op->math.formula == nullptr) continue;  // an op package's math has no device form
    ++ops_with_math;
    EXPECT_TRUE(listed.count(op->math.formula))
        << op->name << "'s formula " << op->math.formula << " is missing from KILN_FORMULAS (elementwise_formulas.h)";
  }
  EXPECT_GE(ops_with_math, static_cast<int>(listed.size()));  // each listed functor is some op's formula
}

}  // namespace
}  // namespace kiln::testing

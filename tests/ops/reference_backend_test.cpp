// The backend seam, proved on the reference backend: every golden case runs
// with its inputs on the reference device and must give PyTorch's values on
// that device, whether the op has a reference kernel (copy, matmul, sum, the
// elementwise formulas) or runs on the CPU instead; that fallback is counted,
// warned about once, marked in profiles, and an error under strict_device.
#include <gtest/gtest.h>

#include "kiln/backend.h"
#include "kiln/jit.h"
#include "kiln/nn.h"
#include "kiln/profiler.h"
#include "ops/golden_cases.h"
#include "support/error_message.h"

namespace kiln::testing {
namespace {

const Device kRef{DeviceType::Reference, 0};

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

std::vector<int> all_cases() {
  std::vector<int> idx;
  for (size_t i = 0; i < golden_cases().size(); ++i) idx.push_back(static_cast<int>(i));
  return idx;
}

class OnReference : public ::testing::TestWithParam<int> {};

TEST_P(OnReference, MatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  std::vector<Tensor> inputs = c.make_inputs();
  for (Tensor& t : inputs)
    if (t.defined()) t = t.to(kRef);
  std::vector<Tensor> out = call(c.op, inputs, c.attrs);
  if (out.empty()) out.push_back(inputs[0]);  // ops that write their input (assign)
  ASSERT_GE(out.size(), c.outputs.size());
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    EXPECT_EQ(out[i].device(), kRef) << c.name << " output " << i << " left the reference device";
    std::string diff = compare(out[i].to(cpu_device()), c.outputs[i].values, c.outputs[i].shape,
                               forward_tolerance(c.dtype));
    EXPECT_TRUE(diff.empty()) << c.name << " output " << i << " on the reference backend:\n" << diff;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, OnReference, ::testing::ValuesIn(all_cases()), case_name);

TEST(ReferenceBackend, KernelsComeFromItsLoopsAndTheFormulas) {
  const OpDef& add = OpRegistry::instance().get("add");
  const OpDef& hardswish = OpRegistry::instance().get("hardswish");
  const OpDef& conv = OpRegistry::instance().get("conv2d");
  auto has = [](const OpDef& op, DType d) { return op.kernels[static_cast<int>(DeviceType::Reference)][static_cast<int>(d)]; };
  EXPECT_TRUE(has(add, DType::Float32) && has(add, DType::BFloat16));  // from the formula
  EXPECT_FALSE(has(add, DType::Int64));                               // formulas are floating
  EXPECT_TRUE(has(hardswish, DType::Float64));
  EXPECT_TRUE(has(OpRegistry::instance().get("matmul"), DType::Float32));
  EXPECT_FALSE(has(conv, DType::Float32));
}

TEST(ReferenceBackend, FallbackIsCountedWarnedOnceAndProfiled) {
  Tensor x = randn({1, 2, 5, 5}).to(kRef), w = randn({3, 2, 3, 3}).to(kRef);
  const int64_t before = fallback_count();
  ::testing::internal::CaptureStderr();
  profiler::start();
  Tensor y = conv2d(x, w);
  Tensor z = conv2d(x, w);
  Tensor s = add(y, z);
  profiler::stop();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(fallback_count() - before, 2);
  EXPECT_EQ(y.device(), kRef);
  EXPECT_EQ(s.device(), kRef);
  // The same values as on the CPU.
  Tensor want = conv2d(x.to(cpu_device()), w.to(cpu_device()));
  EXPECT_EQ(compare(y.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {1e-6, 1e-6}), "");
  size_t warned = 0;
  for (size_t at = err.find("op 'conv2d' has no reference kernel"); at != std::string::npos;
       at = err.find("op 'conv2d' has no reference kernel", at + 1))
    ++warned;
  EXPECT_LE(warned, 1u) << err;  // once per process, and another test may have warned first
  int conv_fallbacks = 0, add_fallbacks = 0;
  for (const auto& r : profiler::records()) {
    if (r.name == "conv2d") conv_fallbacks += r.fallback;
    if (r.name == "add") add_fallbacks += r.fallback;
  }
  EXPECT_EQ(conv_fallbacks, 2);
  EXPECT_EQ(add_fallbacks, 0);
  EXPECT_NE(profiler::summary().find("fallback"), std::string::npos);
}

TEST(ReferenceBackend, StrictDeviceRefusesTheFallback) {
  Tensor x = randn({1, 2, 5, 5}).to(kRef), w = randn({3, 2, 3, 3}).to(kRef);
  set_strict_device(true);
  std::string msg = message_of([&] { conv2d(x, w); });
  Tensor fine = relu(x);  // has a reference kernel
  set_strict_device(false);
  EXPECT_NE(msg.find("conv2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no reference kernel for dtype float32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KILN_STRICT_DEVICE"), std::string::npos) << msg;
  EXPECT_EQ(fine.device(), kRef);
}

TEST(ReferenceBackend, TensorsAndCellsMoveBetweenDevices) {
  Tensor a = randn({3, 4});
  Tensor back = a.transpose(0, 1).to(kRef).to(cpu_device());
  EXPECT_EQ(back.device(), cpu_device());
  EXPECT_EQ(back.to_vector<float>(), a.transpose(0, 1).contiguous().to_vector<float>());

  auto net = std::make_shared<nn::SequentialCell>(
      std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(4, 5), std::make_shared<nn::ReLU>(), std::make_shared<nn::Dense>(5, 2)});
  Tensor x = randn({6, 4});
  Tensor on_cpu;
  {
    NoGradGuard no_grad;
    on_cpu = (*net)(x);
  }
  net->to(kRef);
  for (auto& [name, p] : net->parameters_and_names()) EXPECT_EQ(p.device(), kRef) << name;
  NoGradGuard no_grad;
  Tensor on_ref = (*net)(x.to(kRef));
  EXPECT_EQ(on_ref.device(), kRef);
  EXPECT_EQ(compare(on_ref.to(cpu_device()), on_cpu.to(DType::Float64).to_vector<double>(), on_cpu.shape(), {1e-5, 1e-6}), "");
  // Inputs on two devices are refused, naming both.
  std::string msg = message_of([&] { (*net)(x); });
  EXPECT_NE(msg.find("reference:0"), std::string::npos) << msg;
}

TEST(ReferenceBackend, GradientsFlowBackAcrossDevices) {
  // y = sum(to_cpu(to_ref(w) * to_ref(x) * 2)): the gradient reaches the CPU
  // leaves through both transfers, as if the multiply had run on the CPU. The
  // 2 is a CPU scalar, which joins the reference tensors.
  Tensor w = randn({3, 4}), x = randn({3, 4});
  w.set_requires_grad(true);
  Tensor y = sum((mul(w.to(kRef), x.to(kRef)) * 2.0).to(cpu_device()));
  EXPECT_EQ(y.device(), cpu_device());
  y.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().device(), cpu_device());
  EXPECT_EQ(w.grad().to_vector<float>(), (x * 2.0).to_vector<float>());
  // The transfer is an op the profiler and the tape both see.
  Tensor r = w.to(kRef);
  ASSERT_NE(r.grad_fn(), nullptr);
  // Leaves moved with Cell::to stay leaves on their new device and get their gradients there.
  auto dense = std::make_shared<nn::Dense>(4, 2);
  dense->to(kRef);
  Tensor loss = mean((*dense)(x.to(kRef)));
  EXPECT_EQ(loss.device(), kRef);
  loss.backward();
  for (auto& [name, p] : dense->parameters_and_names()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().device(), kRef) << name;
  }
}

// A compiled graph on the reference backend: its arena is reference memory,
// matmul and relu run the reference kernels, softmax (which it lacks) the
// CPU's in place, counted once per run; the CPU's own passes stay out.
TEST(ReferenceBackend, GraphModeRunsOnItsKernelsWithVisibleFallback) {
  jit::Function fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{softmax(relu(matmul(in[0], in[1])), -1)};
  };
  Tensor x = randn({4, 3}), w = randn({3, 5});
  auto compiled = jit::compile(fn, {x.to(kRef), w.to(kRef)});
  const int64_t before = fallback_count();
  Tensor y = compiled({x.to(kRef), w.to(kRef)})[0];
  EXPECT_EQ(fallback_count() - before, 1);
  EXPECT_EQ(y.device(), kRef);
  EXPECT_EQ(compare(y.to(cpu_device()), fn({x, w})[0].to(DType::Float64).to_vector<double>(), {4, 5}, {1e-5, 1e-6}), "");
  EXPECT_EQ(compiled.graph_text().find("fused"), std::string::npos) << compiled.graph_text();
  // Inputs on two devices are refused, naming both.
  std::string msg = message_of([&] { jit::compile(fn, {x.to(kRef), w}); });
  EXPECT_NE(msg.find("reference:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

TEST(ReferenceBackend, DevicesParseFromText) {
  EXPECT_EQ(parse_device("reference"), kRef);
  EXPECT_EQ(parse_device("cuda:1"), (Device{DeviceType::CUDA, 1}));
  EXPECT_EQ(parse_device("cpu"), cpu_device());
  EXPECT_NE(message_of([] { parse_device("tpu"); }).find("devices are cpu, cuda[:N] and reference[:N]"), std::string::npos);
  EXPECT_NE(message_of([] { parse_device("cuda:x"); }).find("must be a number"), std::string::npos);
  EXPECT_NE(message_of([] { Tensor::empty({2}, DType::Float32, Device{DeviceType::CUDA, 0}); }).find("no cuda backend"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::testing

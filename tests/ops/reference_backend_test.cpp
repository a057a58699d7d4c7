// The backend seam, proved on the reference backend: every golden case runs
// with its inputs on the reference device and must give PyTorch's values and
// input gradients on that device, whether the op has a reference kernel
// (copy, matmul, sum, conv2d, the elementwise formulas) or runs on the CPU
// instead, for want of a kernel or because the kernel does not take the call
// (a grouped convolution); that fallback is counted, warned about once, marked in
// profiles, and an error under strict_device. Compiled graphs take their run
// loop from the backend.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kiln/backend.h"
#include "kiln/jit.h"
#include "kiln/nn.h"
#include "kiln/profiler.h"
#include "ops/dispatch_internal.h"
#include "ops/golden_cases.h"
#include "support/error_message.h"

namespace kiln::testing {
namespace {

const Device kRef{DeviceType::Reference, 0};

std::string case_name(const ::testing::TestParamInfo<int>& info) { return golden_test_name(info.param); }

class OnReference : public ::testing::TestWithParam<int> {};

TEST_P(OnReference, MatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  const std::string diff = forward_mismatch_on(c, kRef);
  EXPECT_TRUE(diff.empty()) << c.name << " on the reference backend:\n" << diff;
}

// Backward from inputs on a device: the gradient rules' own tensors (masks,
// zeros, scalars) must join the inputs there.
class GradientOnReference : public ::testing::TestWithParam<int> {};
TEST_P(GradientOnReference, MatchesPyTorch) {
  const GoldenCase& c = golden_cases()[GetParam()];
  const std::string diff = gradient_mismatch_on(c, kRef);
  EXPECT_TRUE(diff.empty()) << c.name << " on the reference backend:\n" << diff;
}

INSTANTIATE_TEST_SUITE_P(Registry, OnReference, ::testing::ValuesIn(golden_case_indices()), case_name);
INSTANTIATE_TEST_SUITE_P(Registry, GradientOnReference, ::testing::ValuesIn(golden_case_indices(true)), case_name);

TEST(ReferenceBackend, KernelsComeFromItsLoopsAndTheFormulas) {
  const OpDef& add = OpRegistry::instance().get("add");
  const OpDef& hardswish = OpRegistry::instance().get("hardswish");
  const OpDef& conv = OpRegistry::instance().get("conv2d");
  auto has = [](const OpDef& op, DType d) { return op.kernels[static_cast<int>(DeviceType::Reference)][static_cast<int>(d)]; };
  EXPECT_TRUE(has(add, DType::Float32) && has(add, DType::BFloat16));  // from the formula
  EXPECT_FALSE(has(add, DType::Int64));                               // formulas are floating
  EXPECT_TRUE(has(hardswish, DType::Float64));
  EXPECT_TRUE(has(OpRegistry::instance().get("matmul"), DType::Float32));
  EXPECT_TRUE(has(conv, DType::Float32));
  EXPECT_FALSE(has(OpRegistry::instance().get("softmax"), DType::Float32));
}

// The CPU runs a pointwise (1x1) convolution as one GEMM per image; the
// reference backend's loops are the definition. Pixel counts that are not
// multiples of a vector, output channels from few to many, deep and shallow
// inputs, a batch.
TEST(ReferenceBackend, CpuPointwiseConvolutionMatchesTheReferenceLoops) {
  manual_seed(12);
  for (const Shape& s : {Shape{2, 40, 14, 14, 30}, Shape{1, 600, 7, 7, 13}, Shape{1, 8, 8, 4, 100}, Shape{1, 3, 3, 3, 5}}) {
    Tensor x = randn({s[0], s[1], s[2], s[3]}), w = randn({s[4], s[1], 1, 1}) * 0.1, b = randn({s[4]});
    const Tensor got = conv2d(x, w, b);  // first, so that no freed result of the same size lies where it writes
    const Tensor want = conv2d(x.to(kRef), w.to(kRef), b.to(kRef)).to(Device{});
    ASSERT_EQ(got.shape(), want.shape());
    const auto g = got.to_vector<float>(), r = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], r[i], 1e-4 * (1 + std::abs(r[i]))) << "shape " << ::testing::PrintToString(s) << ", element " << i;
  }
}

TEST(ReferenceBackend, FallbackIsCountedWarnedOnceAndProfiled) {
  Tensor x = randn({1, 2, 5, 5}).to(kRef);
  const int64_t before = fallback_count();
  ::testing::internal::CaptureStderr();
  profiler::start();
  Tensor y = softmax(x, 1);
  Tensor z = softmax(x, 1);
  Tensor s = add(y, z);
  profiler::stop();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(fallback_count() - before, 2);
  EXPECT_EQ(y.device(), kRef);
  EXPECT_EQ(s.device(), kRef);
  // The same values as on the CPU.
  Tensor want = softmax(x.to(cpu_device()), 1);
  EXPECT_EQ(compare(y.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {1e-6, 1e-6}), "");
  const std::string warning = "op 'softmax': no reference kernel for dtype float32";
  size_t warned = 0;
  for (size_t at = err.find(warning); at != std::string::npos; at = err.find(warning, at + 1)) ++warned;
  EXPECT_LE(warned, 1u) << err;  // once per process, and another test may have warned first
  int softmax_fallbacks = 0, add_fallbacks = 0;
  for (const auto& r : profiler::records()) {
    if (r.name == "softmax") softmax_fallbacks += r.fallback;
    if (r.name == "add") add_fallbacks += r.fallback;
  }
  EXPECT_EQ(softmax_fallbacks, 2);
  EXPECT_EQ(add_fallbacks, 0);
  EXPECT_NE(profiler::summary().find("fallback"), std::string::npos);
}

// Half precision where the device's kernel stops at float32: the device's
// float32 kernel runs on widened copies (matmul stays on the device); where
// the device has none and the CPU widens, the fallback widens too.
TEST(ReferenceBackend, HalfPrecisionWidensOnTheDeviceOrInTheFallback) {
  manual_seed(21);
  const Tensor a = randn({5, 7}).to(DType::Float16), b = randn({7, 3}).to(DType::Float16);
  profiler::start();
  const Tensor y = matmul(a.to(kRef), b.to(kRef));
  profiler::stop();
  EXPECT_EQ(y.device(), kRef);
  EXPECT_EQ(y.dtype(), DType::Float16);
  int matmuls = 0;
  for (const auto& r : profiler::records()) {
    if (r.name != "matmul") continue;
    ++matmuls;
    EXPECT_FALSE(r.fallback) << "matmul left the reference device";
  }
  EXPECT_EQ(matmuls, 1);
  const Tensor want = matmul(a, b);
  EXPECT_EQ(compare(y.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {1e-3, 1e-3}), "");

  const Tensor x = randn({1, 4, 3, 3}).to(DType::BFloat16), w = randn({4, 2, 2, 2}).to(DType::BFloat16);
  ConvOptions o;
  o.stride = {2, 2};
  const Tensor up = conv_transpose2d(x.to(kRef), w.to(kRef), Tensor(), o);  // no reference kernel; the CPU widens
  const Tensor up_cpu = conv_transpose2d(x, w, Tensor(), o);
  EXPECT_EQ(up.dtype(), DType::BFloat16);
  EXPECT_EQ(compare(up.to(cpu_device()), up_cpu.to(DType::Float64).to_vector<double>(), up_cpu.shape(), {1e-2, 1e-2}),
            "");
}

// A device that queues its work gets its kernels' time there, from events
// around them (the reference backend's events are times on the host), in
// the records and the summary; the CPU's ops have none.
TEST(ReferenceBackend, ProfilesTimeKernelsOnTheDevice) {
  const Tensor x = randn({48, 48});
  profiler::start();
  const Tensor on_device = relu(matmul(x.to(kRef), x.to(kRef)));
  const Tensor on_cpu = matmul(x, x);
  profiler::stop();
  int timed = 0, untimed = 0;
  for (const auto& r : profiler::records()) {
    if (r.name != "matmul" && r.name != "relu") continue;
    if (r.backend == "cpu") {
      EXPECT_EQ(r.device_ns, -1) << r.name;
      ++untimed;
    } else {
      EXPECT_GE(r.device_ns, 0) << r.name;
      ++timed;
    }
  }
  EXPECT_EQ(timed, 2);
  EXPECT_EQ(untimed, 1);
  EXPECT_NE(profiler::summary().find("device ms"), std::string::npos) << profiler::summary();
}

// A recurrent op on a device without a recurrent kernel runs as its loop of
// ops on that device (OpDef::decompose), not on the CPU: the CPU kernel's
// values and gradients, for each kind and gate variant, forward and reverse.
TEST(ReferenceBackend, RecurrentOpsDecomposeOnTheDevice) {
  manual_seed(22);
  const int64_t t = 5, n = 3, in = 4, h = 6;
  struct Case {
    std::string op;
    int64_t gates;
    Attrs attrs;
  };
  const std::vector<Case> cases = {{"lstm", 4, {{"reverse", false}}},
                                   {"lstm", 4, {{"reverse", true}}},
                                   {"gru", 3, {{"linear_before_reset", true}}},
                                   {"gru", 3, {{"linear_before_reset", false}, {"reverse", true}}},
                                   {"rnn", 1, {{"nonlinearity", std::string("relu")}}}};
  for (const Case& c : cases) {
    std::vector<Tensor> args = {randn({t, n, in}, DType::Float64),
                                randn({c.gates * h, in}, DType::Float64) * 0.5,
                                randn({c.gates * h, h}, DType::Float64) * 0.5,
                                randn({c.gates * h}, DType::Float64),
                                randn({c.gates * h}, DType::Float64),
                                randn({n, h}, DType::Float64)};
    if (c.op == "lstm") args.push_back(randn({n, h}, DType::Float64));
    auto run = [&](Device device) {
      std::vector<Tensor> ins;
      for (const Tensor& a : args) ins.push_back(a.to(device).set_requires_grad(true));
      const std::vector<Tensor> out = call(c.op, ins, c.attrs);
      sum(out[0] * out[0]).backward();
      std::vector<Tensor> got = {out[0].detach(), out[1].detach()};
      for (const Tensor& i : ins) got.push_back(i.grad());
      return got;
    };
    profiler::start();
    const auto on_device = run(kRef);
    profiler::stop();
    for (const auto& r : profiler::records()) EXPECT_NE(r.name, c.op) << c.op << " ran as one op (on the CPU)";
    const auto on_cpu = run(cpu_device());
    for (size_t i = 0; i < on_cpu.size(); ++i) {
      ASSERT_TRUE(on_device[i].defined()) << c.op << " result " << i;
      EXPECT_EQ(on_device[i].device(), kRef) << c.op << " result " << i;
      const Tensor want = on_cpu[i];
      EXPECT_EQ(compare(on_device[i].to(cpu_device()), want.to_vector<double>(), want.shape(), {1e-10, 1e-10}), "")
          << c.op << " " << c.attrs.str() << " result " << i;
    }
  }
}

// An inference graph traced on the CPU for a device without recurrent
// kernels (jit's CompileOptions::device, as InferenceSession compiles) is
// traced as the recurrent ops' decomposition, so none of it is left on the
// CPU as one recurrent node; its values are the CPU's.
TEST(ReferenceBackend, GraphsForTheDeviceTraceRecurrentOpsAsTheirDecomposition) {
  manual_seed(23);
  const int64_t t = 4, n = 2, in = 3, h = 5;
  const Tensor x = randn({t, n, in}), w_ih = randn({4 * h, in}) * 0.5, w_hh = randn({4 * h, h}) * 0.5,
               b_ih = randn({4 * h}), b_hh = randn({4 * h}), h0 = randn({n, h}), c0 = randn({n, h});
  auto fn = [&](const std::vector<Tensor>& inputs) {
    return std::vector<Tensor>{call("lstm", {inputs[0], w_ih, w_hh, b_ih, b_hh, h0, c0}, {{"reverse", false}})[0]};
  };
  const Tensor want = fn({x})[0];
  jit::CompileOptions o;
  o.inference = true;
  o.device = kRef;
  auto compiled = jit::compile(fn, {x}, o);
  const Tensor got = compiled({x})[0];
  EXPECT_EQ(got.device(), kRef);
  for (const std::string& node : compiled.report().on_cpu)
    EXPECT_EQ(node.find("lstm"), std::string::npos) << "left on the CPU: " << node;
  EXPECT_GT(compiled.report().traced_nodes, 10u) << "the LSTM was traced as one node";
  EXPECT_EQ(compare(got.to(cpu_device()), want.to_vector<double>(), want.shape(), {1e-5, 1e-5}), "");
  // Compiled for the CPU, the same function keeps its one LSTM node.
  jit::CompileOptions for_cpu;
  for_cpu.inference = true;
  auto on_cpu = jit::compile(fn, {x}, for_cpu);
  EXPECT_EQ(compare(on_cpu({x})[0], want.to_vector<double>(), want.shape(), {1e-5, 1e-5}), "");
  EXPECT_LT(on_cpu.report().traced_nodes, 5u);
}

TEST(ReferenceBackend, StrictDeviceRefusesTheFallback) {
  Tensor x = randn({1, 2, 5, 5}).to(kRef);
  set_strict_device(true);
  std::string msg = message_of([&] { softmax(x, 1); });
  Tensor fine = relu(x);  // has a reference kernel
  set_strict_device(false);
  EXPECT_NE(msg.find("softmax"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no reference kernel for dtype float32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KILN_STRICT_DEVICE"), std::string::npos) << msg;
  EXPECT_EQ(fine.device(), kRef);
}

// The reference conv2d loop takes groups=1 only: its kernel registers with
// an acceptance test that says so, so a grouped convolution runs on the
// CPU, visibly, in eager and compiled runs, and strict_device names the reason.
// The reference embedding loop declares the dtypes it takes per input: the
// table of its registered dtype, the indices int64 only. The kernel lookup
// refuses int32 indices, naming the input; the dispatcher then widens them
// on the device (its int32-to-int64 cast), so the call stays there, in
// strict mode too, eager and compiled.
TEST(ReferenceBackend, KernelsDeclareTheDtypesTheyTakePerInput) {
  const Tensor table = randn({10, 4});
  const Tensor ids64 = from_vector(std::vector<int64_t>{3, 0, 9, 3}, Shape{2, 2});
  const Tensor want = embedding(table, ids64);
  int64_t before = fallback_count();
  Tensor y = embedding(table.to(kRef), ids64.to(kRef));
  EXPECT_EQ(fallback_count() - before, 0) << "int64 indices run the reference loop";
  EXPECT_EQ(compare(y.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {0, 0}), "");

  std::string refused;
  EXPECT_EQ(device_kernel(OpRegistry::instance().get("embedding"), kRef, {DType::Float32, DType::Int32}, DType::Float32,
                          {}, &refused),
            nullptr);
  EXPECT_NE(refused.find("indices of dtype int32 (its kernel takes int64)"), std::string::npos) << refused;

  set_strict_device(true);
  before = fallback_count();
  const Tensor ids32 = ids64.to(DType::Int32).to(kRef);
  Tensor y32 = embedding(table.to(kRef), ids32);
  auto fn = jit::compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{embedding(in[0], in[1])}; },
                         {table.to(kRef), ids32});
  Tensor compiled = fn({table.to(kRef), ids32})[0];
  set_strict_device(false);
  EXPECT_EQ(fallback_count() - before, 0) << "int32 indices are widened on the device";
  EXPECT_EQ(y32.device(), kRef);
  EXPECT_EQ(compare(y32.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {0, 0}), "");
  EXPECT_EQ(compare(compiled.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {0, 0}), "");
  EXPECT_TRUE(fn.report().on_cpu.empty()) << fn.report().str();
  // A bfloat16 table: the float32 loop, the indices widened as well (the
  // table's cast to float32 itself runs on the CPU here, visibly).
  const Tensor half_table = table.to(DType::BFloat16);
  const Tensor y16 = embedding(half_table.to(kRef), ids32);
  ASSERT_EQ(y16.dtype(), DType::BFloat16);
  const Tensor want16 = embedding(half_table, ids64).to(DType::Float64);
  EXPECT_EQ(compare(y16.to(cpu_device()), want16.to_vector<double>(), want.shape(), {0, 0}), "");
}

TEST(ReferenceBackend, CallsItsKernelDoesNotTakeFallBackVisibly) {
  Tensor x = randn({2, 4, 6, 6}), w = randn({6, 4, 3, 3}), wg = randn({6, 2, 3, 3}), b = randn({6});
  ConvOptions plain, grouped;
  plain.padding = {1, 1};
  grouped.groups = 2;
  grouped.stride = {2, 2};
  int64_t before = fallback_count();
  Tensor y = conv2d(x.to(kRef), w.to(kRef), b.to(kRef), plain);
  EXPECT_EQ(fallback_count() - before, 0) << "groups=1 runs the reference loop";
  Tensor want = conv2d(x, w, b, plain);
  EXPECT_EQ(compare(y.to(cpu_device()), want.to(DType::Float64).to_vector<double>(), want.shape(), {1e-5, 1e-5}), "");

  ::testing::internal::CaptureStderr();
  before = fallback_count();
  Tensor yg = conv2d(x.to(kRef), wg.to(kRef), b.to(kRef), grouped);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(fallback_count() - before, 1);
  EXPECT_EQ(yg.device(), kRef);
  Tensor want_g = conv2d(x, wg, b, grouped);
  EXPECT_EQ(compare(yg.to(cpu_device()), want_g.to(DType::Float64).to_vector<double>(), want_g.shape(), {1e-5, 1e-5}), "");
  if (!err.empty()) {  // another test may have warned first
    EXPECT_NE(err.find("groups=2"), std::string::npos) << err;
  }

  jit::Function fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{conv2d(in[0], in[1], Tensor(), grouped)}; };
  auto compiled = jit::compile(fn, {x.to(kRef), wg.to(kRef)});
  before = fallback_count();
  Tensor yc = compiled({x.to(kRef), wg.to(kRef)})[0];
  EXPECT_EQ(fallback_count() - before, 1);
  EXPECT_EQ(compare(yc.to(cpu_device()), conv2d(x, wg, Tensor(), grouped).to(DType::Float64).to_vector<double>(),
                    want_g.shape(), {1e-5, 1e-5}), "");

  set_strict_device(true);
  const std::string msg = message_of([&] { conv2d(x.to(kRef), wg.to(kRef), Tensor(), grouped); });
  Tensor fine = conv2d(x.to(kRef), w.to(kRef), Tensor(), plain);
  set_strict_device(false);
  EXPECT_NE(msg.find("the reference kernel does not take this call (groups=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("KILN_STRICT_DEVICE"), std::string::npos) << msg;
  EXPECT_EQ(fine.device(), kRef);
  const OpDef& conv = OpRegistry::instance().get("conv2d");
  const Kernel& k = conv.kernels[static_cast<int>(DeviceType::Reference)][static_cast<int>(DType::Float32)];
  EXPECT_STREQ(k.refuses, "groups other than 1");
  std::string why;
  const std::vector<DType> dtypes{DType::Float32, DType::Float32};
  EXPECT_TRUE(k.accepts(KernelCall{dtypes, Attrs{{"groups", int64_t{1}}}}, &why));
  EXPECT_FALSE(k.accepts(KernelCall{dtypes, Attrs{{"groups", int64_t{3}}}}, &why));
  EXPECT_EQ(why, "groups=3: its loop takes groups=1 only");
  const OpDef& matmul_op = OpRegistry::instance().get("matmul");
  EXPECT_EQ(matmul_op.kernels[static_cast<int>(DeviceType::Reference)][static_cast<int>(DType::Float32)].accepts, nullptr);
}

// A backend that queues a compiled graph's steps on a stream of its own (a
// worker thread here) and waits for them in synchronize(), as a device
// backend does: the executor takes its run loop from the backend and waits
// before it hands the outputs back.
class StreamBackend : public Backend {
 public:
  explicit StreamBackend(Backend& inner) : inner_(inner) {}
  // The reference backend's memory (its handles) and copies.
  Allocator& allocator(int index) override { return inner_.allocator(index); }
  bool host_memory() const override { return inner_.host_memory(); }
  void copy_to_host(void* dst, const void* src, size_t n, int index) override { inner_.copy_to_host(dst, src, n, index); }
  void copy_from_host(void* dst, const void* src, size_t n, int index) override {
    inner_.copy_from_host(dst, src, n, index);
  }
  void run_steps(int, size_t count, const std::function<void(size_t)>& step) override {
    ++runs;
    worker_ = std::thread([count, step, this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the caller must wait, not race
      for (size_t i = 0; i < count; ++i) step(i);
      steps += count;
      on_worker = true;
    });
  }
  void synchronize(int) override {
    if (worker_.joinable()) worker_.join();
    ++syncs;
  }
  int runs = 0, syncs = 0;
  size_t steps = 0;
  bool on_worker = false;

 private:
  Backend& inner_;
  std::thread worker_;
};

TEST(ReferenceBackend, CompiledGraphsRunOnTheBackendsRunLoop) {
  Backend& reference = backend(DeviceType::Reference);
  StreamBackend stream(reference);
  jit::Function fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{add(relu(matmul(in[0], in[1])), sum(in[0]))};
  };
  Tensor x = randn({4, 3}), w = randn({3, 5});
  register_backend(DeviceType::Reference, &stream);
  Tensor y;
  try {
    auto compiled = jit::compile(fn, {x.to(kRef), w.to(kRef)});
    y = compiled({x.to(kRef), w.to(kRef)})[0].to(cpu_device());
  } catch (...) {
    register_backend(DeviceType::Reference, &reference);
    throw;
  }
  register_backend(DeviceType::Reference, &reference);
  EXPECT_EQ(stream.runs, 1);
  EXPECT_GE(stream.syncs, 1);
  EXPECT_TRUE(stream.on_worker);
  EXPECT_GE(stream.steps, 4u);  // matmul, relu, sum, add
  EXPECT_EQ(compare(y, fn({x, w})[0].to(DType::Float64).to_vector<double>(), {4, 5}, {1e-5, 1e-6}), "");
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
// matmul and relu run the reference kernels; softmax (which it lacks) is
// placed on the CPU, with a transfer node on each side, counted once per
// run and named in the compile report; the CPU's own passes stay out.
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
  // softmax moved to the CPU with its data: one transfer there, one back.
  const std::string text = compiled.graph_text();
  size_t transfers = 0;
  for (size_t at = text.find("to_device("); at != std::string::npos; at = text.find("to_device(", at + 1)) ++transfers;
  EXPECT_EQ(transfers, 2u) << text;
  EXPECT_NE(text.find("softmax(%5)"), std::string::npos) << text;
  EXPECT_NE(text.find("{device=cpu}"), std::string::npos) << text;
  // The compile report names the node that left the device, and why.
  ASSERT_EQ(compiled.report().on_cpu.size(), 1u) << compiled.report().str();
  EXPECT_NE(compiled.report().on_cpu[0].find("no reference kernel for float32"), std::string::npos)
      << compiled.report().str();
  EXPECT_NE(compiled.report().str().find("1 node run on the CPU"), std::string::npos) << compiled.report().str();
  // Inputs on two devices are refused, naming both.
  std::string msg = message_of([&] { jit::compile(fn, {x.to(kRef), w}); });
  EXPECT_NE(msg.find("reference:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
}

TEST(ReferenceBackend, DevicesParseFromText) {
  EXPECT_EQ(parse_device("reference"), kRef);
  EXPECT_EQ(parse_device("cuda:1"), (Device{DeviceType::CUDA, 1}));
  EXPECT_EQ(parse_device("cpu"), cpu_device());
  EXPECT_NE(message_of([] { parse_device("tpu"); }).find("devices are cpu, cuda[:N], reference[:N]"), std::string::npos);
  EXPECT_NE(message_of([] { parse_device("cuda:x"); }).find("must be a number"), std::string::npos);
  EXPECT_NE(message_of([] { Tensor::empty({2}, DType::Float32, Device{DeviceType::CUDA, 0}); }).find("no cuda backend"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::testing

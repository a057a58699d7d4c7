// Fused elementwise kernels on CUDA (backends/cuda/passes): the generated
// source compiles with NVRTC for every formula, is kept on disk so that a
// later compile reads it, and computes what the ops compute one at a time:
// without a GPU, the same generated code is compiled by the host compiler
// (a kernel of one thread) and run on CPU tensors against eager mode; with
// one, compiled graphs fuse their chains and match eager CUDA.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "backends/cuda/passes/fused_elementwise.h"
#include "backends/cuda/runtime_compiler.h"
#include "cuda/gpus.h"
#include "kiln/functional.h"
#include "kiln/jit.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

using cuda::FusedInput;
using graph::ElementwiseExpression;
using Operand = ElementwiseExpression::Operand;

const OpDef& op(const std::string& name) { return OpRegistry::instance().get(name); }

ElementwiseExpression::Step step(const std::string& name, Operand a, Operand b = {}, Attrs attrs = {}) {
  ElementwiseExpression::Step s;
  s.op = &op(name);
  s.a = a;
  s.b = b;
  s.attrs = std::move(attrs);
  return s;
}
Operand input(int k) { return {true, k}; }
Operand result(int k) { return {false, k}; }

// The ops with a formula the CUDA backend generates code from.
std::vector<const OpDef*> formula_ops() {
  std::vector<const OpDef*> ops;
  for (const OpDef* o : OpRegistry::instance().all())
    if (o->math && o->math.formula != nullptr) ops.push_back(o);
  return ops;
}

// A temporary folder, removed at the end of the test.
struct TemporaryFolder {
  std::filesystem::path path;
  TemporaryFolder() {
    char name[] = "/tmp/kiln_fusion_XXXXXX";
    path = mkdtemp(name);
  }
  ~TemporaryFolder() { std::filesystem::remove_all(path); }
};

// Sets an environment variable for the scope, restoring what was there.
struct ScopedEnv {
  std::string name, old;
  bool had;
  ScopedEnv(const char* n, const std::string& value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() { had ? setenv(name.c_str(), old.c_str(), 1) : unsetenv(name.c_str()); }
};

TEST(CudaFusionSource, EveryFormulaCompilesWithNvrtc) {
  ScopedEnv no_cache("KILN_KERNEL_CACHE", "off");
  // Every formula as one step of one kernel, with its inputs read in each way.
  ElementwiseExpression e;
  e.steps.push_back(step("mul", input(0), input(1)));
  for (const OpDef* o : formula_ops()) {
    ElementwiseExpression::Step s;
    s.op = o;
    s.a = result(static_cast<int>(e.steps.size()) - 1);
    s.b = input(2);
    e.steps.push_back(s);
  }
  const std::vector<FusedInput> kinds = {FusedInput::Dense, FusedInput::Broadcast, FusedInput::Scalar};
  const std::string source = cuda::fused_kernel_source(e, kinds);
  const auto before = cuda::runtime_compile_counts();
  EXPECT_FALSE(cuda::compile_runtime_source(source, "every_formula", {90, false}).empty());  // an sm_90 cubin
  EXPECT_NE(cuda::compile_runtime_source(source, "every_formula", {80, true}).find(".entry kiln_fused"),
            std::string::npos);  // PTX for the driver to finish
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, before.compiled + 2);
}

TEST(CudaFusionSource, NvrtcErrorsNameTheKernelAndTheWayAround) {
  ScopedEnv no_cache("KILN_KERNEL_CACHE", "off");
  try {
    cuda::compile_runtime_source("extern \"C\" __global__ void k() { undeclared(); }", "broken", {90, false});
    FAIL() << "a source that does not compile compiled";
  } catch (const std::exception& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'broken'"), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared"), std::string::npos) << what;  // NVRTC's log
    EXPECT_NE(what.find("KILN_CUDA_FUSION=0"), std::string::npos) << what;
  }
}

TEST(CudaFusionSource, ASecondCompileOfTheSameSourceReadsTheDiskCache) {
  TemporaryFolder folder;
  ScopedEnv cache("KILN_KERNEL_CACHE", folder.path.string());
  ElementwiseExpression e;
  e.steps = {step("add", input(0), input(1)), step("gelu", result(0))};
  const std::string source = cuda::fused_kernel_source(e, {FusedInput::Dense, FusedInput::Broadcast});
  const auto start = cuda::runtime_compile_counts();
  const std::string first = cuda::compile_runtime_source(source, "add_gelu", {90, false});
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, start.compiled + 1);
  // What a second process finds: the same image, compiled by nobody.
  EXPECT_EQ(cuda::compile_runtime_source(source, "add_gelu", {90, false}), first);
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, start.compiled + 1);
  EXPECT_EQ(cuda::runtime_compile_counts().from_disk, start.from_disk + 1);
  // Another architecture is another image; a file that does not hold this
  // source under its name (a hash collision, a torn copy) is compiled again.
  cuda::compile_runtime_source(source, "add_gelu", {80, false});
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, start.compiled + 2);
  for (const auto& f : std::filesystem::directory_iterator(folder.path))
    if (f.path().extension() == ".cu") std::ofstream(f.path()) << "something else";
  cuda::compile_runtime_source(source, "add_gelu", {90, false});
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, start.compiled + 3);
}

// The generated code compiled by the host compiler, as a kernel of one block
// of one thread (whose grid-stride loop then walks every element), with a
// function per expression that calls it on the argument bytes a launch passes.
class HostCompiledKernels {
 public:
  explicit HostCompiledKernels(const std::vector<std::pair<ElementwiseExpression, std::vector<FusedInput>>>& kernels) {
    std::string source = R"(#include <algorithm>
#include <cmath>
#define __CUDACC_RTC__ 1
#define __global__
#define __host__
#define __device__
#define KILN_HOST_DEVICE
struct KilnDim { unsigned x; };
static const KilnDim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
)";
    source += std::string(cuda::formulas_source()) + "\n" + cuda::fused_args_source();
    for (size_t k = 0; k < kernels.size(); ++k) {
      const std::string name = "kiln_fused_" + std::to_string(k);
      std::string code = cuda::fused_kernel_code(kernels[k].first, kernels[k].second);
      code.replace(code.find("kiln_fused("), 10, name);
      source += code + "extern \"C\" void run_" + std::to_string(k) + "(void** p) {\n  " + name +
                "(*static_cast<const FusedArgs*>(p[0])";
      for (size_t s = 0; s < kernels[k].first.steps.size(); ++s)
        source += ", *static_cast<const kiln::formulas::" + std::string(kernels[k].first.steps[s].op->math.formula) +
                  "*>(p[" + std::to_string(s + 1) + "])";
      source += ");\n}\n";
    }
    const std::string cpp = folder_.path / "kernels.cpp", so = folder_.path / "kernels.so";
    std::ofstream(cpp) << source;
    const std::string command = std::string(KILN_TEST_CXX) + " -std=c++17 -O1 -shared -fPIC -w " + cpp + " -o " + so;
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    lib_ = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(lib_, nullptr) << dlerror();
  }
  ~HostCompiledKernels() {
    if (lib_) dlclose(lib_);
  }

  // Runs kernel k as the CUDA lowering would launch it: the plan's arguments and the functors' bytes.
  Tensor run(size_t k, const ElementwiseExpression& e, const std::vector<Tensor>& in, const Shape& shape) {
    Tensor out = Tensor::empty(shape, DType::Float32);
    cuda::FusedLaunch plan = cuda::plan_fused_launch(in, out);
    cuda::FusedFunctors functors(e);
    std::vector<void*> params{&plan.args};
    for (size_t s = 0; s < e.steps.size(); ++s) params.push_back(functors.at(s));
    auto fn = reinterpret_cast<void (*)(void**)>(dlsym(lib_, ("run_" + std::to_string(k)).c_str()));
    EXPECT_NE(fn, nullptr);
    if (fn) fn(params.data());
    return out;
  }

 private:
  TemporaryFolder folder_;
  void* lib_ = nullptr;
};

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.to_vector<float>(), w = want.contiguous().to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], 2e-5 * std::max(1.0f, std::fabs(w[i]))) << what << " element " << i;
  }
}

// Inputs in each formula's domain.
Tensor operand_for(const std::string& name, const Shape& shape) {
  const Tensor u = rand(shape);
  if (name == "log" || name == "sqrt" || name == "rsqrt" || name == "pow") return u * 1.9 + 0.1;
  if (name == "asin" || name == "acos" || name == "atanh") return u * 1.8 - 0.9;
  if (name == "acosh") return u * 2.0 + 1.1;
  return u * 4.0 - 2.0;
}

TEST(CudaFusionSource, GeneratedKernelsComputeWhatTheOpsComputeOneAtATime) {
  manual_seed(7);
  // Each formula on a dense input (and a second operand broadcast along the
  // rows), then times a scalar: every formula's functor built from its
  // attributes on the host and read by the generated code.
  const Shape shape{3, 5};
  std::vector<std::pair<ElementwiseExpression, std::vector<FusedInput>>> kernels;
  std::vector<std::vector<Tensor>> inputs;
  std::vector<Tensor> wanted;
  for (const OpDef* o : formula_ops()) {
    Attrs attrs;
    if (o->name == "clamp") attrs = Attrs{{"min", -0.5}, {"max", 0.75}};
    if (o->name == "leaky_relu") attrs = Attrs{{"negative_slope", 0.2}};
    if (o->name == "gelu") attrs = Attrs{{"approximate", std::string("tanh")}};
    if (o->name == "softplus") attrs = Attrs{{"beta", 2.0}, {"threshold", 1.5}};
    const bool binary = o->math.arity > 1;
    ElementwiseExpression e;
    e.steps.push_back(step(o->name, input(0), binary ? input(1) : Operand{}, attrs));
    e.steps.push_back(step("mul", result(0), input(binary ? 2 : 1)));
    std::vector<Tensor> in{operand_for(o->name, shape)};
    if (binary) in.push_back(abs(operand_for(o->name, {5})) + 0.5);
    in.push_back(full({}, 1.5));
    std::vector<Tensor> args{in[0]};
    if (binary) args.push_back(in[1]);
    wanted.push_back(call(*o, args, attrs).at(0) * in.back());
    std::vector<FusedInput> kinds{FusedInput::Dense};
    if (binary) kinds.push_back(FusedInput::Broadcast);
    kinds.push_back(FusedInput::Scalar);
    kernels.push_back({e, kinds});
    inputs.push_back(in);
  }
  // A tree over inputs of every layout: a [3, 1] column, a transposed view,
  // a size-1 middle axis, merged where the strides allow.
  ElementwiseExpression tree;
  tree.steps = {step("add", input(0), input(1)), step("gelu", result(0)), step("mul", result(1), input(2)),
                step("sub", input(3), input(4)), step("maximum", result(2), result(3))};
  const Shape big{2, 3, 1, 4};
  const Tensor transposed = rand({4, 1, 3, 2}).permute({3, 2, 1, 0});
  std::vector<Tensor> tree_in{rand(big), rand({3, 1, 1}), transposed, rand({4}), full({}, 0.25)};
  kernels.push_back(
      {tree,
       {FusedInput::Dense, FusedInput::Broadcast, FusedInput::Broadcast, FusedInput::Broadcast, FusedInput::Scalar}});
  inputs.push_back(tree_in);
  wanted.push_back(maximum(gelu(tree_in[0] + tree_in[1]) * tree_in[2], tree_in[3] - tree_in[4]));

  HostCompiledKernels compiled(kernels);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const cuda::FusedLaunch plan = cuda::plan_fused_launch(inputs[k], Tensor::empty(wanted[k].shape()));
    EXPECT_EQ(plan.kinds, kernels[k].second) << "kernel " << k;
    expect_close(compiled.run(k, kernels[k].first, inputs[k], wanted[k].shape()), wanted[k],
                 kernels[k].first.steps[0].op->name);
  }
}

TEST(CudaFusionSource, TheLaunchMergesAxesThatEveryInputWalksAsOne) {
  const Tensor out = Tensor::empty({2, 3, 1, 4});
  // Dense and scalar inputs need no axes: one flat run.
  cuda::FusedLaunch plan = cuda::plan_fused_launch({rand({2, 3, 1, 4}), full({}, 1.0)}, out);
  EXPECT_EQ(plan.args.rank, 1);
  EXPECT_EQ(plan.args.sizes[0], 24);
  // A row broadcast over the first two axes: those merge, the last stays.
  plan = cuda::plan_fused_launch({rand({4})}, out);
  ASSERT_EQ(plan.args.rank, 2);
  EXPECT_EQ(plan.args.sizes[0], 6);
  EXPECT_EQ(plan.args.strides[0][0], 0);
  EXPECT_EQ(plan.args.strides[0][1], 1);
  EXPECT_THROW(cuda::plan_fused_launch({rand({5})}, out), std::exception);
}

// --- On a GPU ---

TEST(CudaFusion, ACompiledChainRunsAsOneGeneratedKernelAndMatchesEager) {
  NEEDS_A_GPU();
  TemporaryFolder folder;
  ScopedEnv cache("KILN_KERNEL_CACHE", folder.path.string());
  const Device gpu = parse_device("cuda");
  manual_seed(3);
  const Tensor x = randn({64, 257}).to(gpu), b = randn({257}).to(gpu), s = full({}, 0.5).to(gpu);
  auto fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sigmoid(gelu(in[0] * in[2] + in[1]) - in[0]) * in[0]};
  };
  const Tensor eager = fn({x, b, s})[0];
  const auto before = cuda::runtime_compile_counts();
  auto compiled = jit::compile(fn, {x, b, s});
  const int64_t fallbacks = fallback_count();
  const Tensor got = compiled({x, b, s})[0];
  EXPECT_EQ(fallback_count(), fallbacks);
  bool fused = false;
  for (const auto& p : compiled.report().passes)
    fused = fused || (p.pass == "elementwise fusion" && !p.summary.empty());
  EXPECT_TRUE(fused) << compiled.report().str();
  EXPECT_EQ(compiled.report().kernels, 1u) << compiled.graph_text();
  EXPECT_GT(cuda::runtime_compile_counts().compiled, before.compiled);
  expect_close(got.to(cpu_device()), eager.to(cpu_device()), "fused chain");
  // Another compile of the same chain loads the same kernel: nothing compiles.
  const auto after = cuda::runtime_compile_counts();
  auto again = jit::compile(fn, {x, b, s});
  expect_close(again({x, b, s})[0].to(cpu_device()), eager.to(cpu_device()), "fused chain, compiled again");
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, after.compiled);
}

TEST(CudaFusion, TurnedOffTheChainRunsOpByOpWithTheSameAnswer) {
  NEEDS_A_GPU();
  ScopedEnv off("KILN_CUDA_FUSION", "0");
  const Device gpu = parse_device("cuda");
  const Tensor x = randn({33, 17}).to(gpu);
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0] * 2.0 + 1.0) * in[0]}; };
  auto compiled = jit::compile(fn, {x});
  expect_close(compiled({x})[0].to(cpu_device()), fn({x})[0].to(cpu_device()), "unfused chain");
  EXPECT_GT(compiled.report().kernels, 1u);
}

TEST(CudaFusion, ATrainingStepWithFusedChainsMatchesEager) {
  NEEDS_A_GPU();
  const Device gpu = parse_device("cuda");
  manual_seed(11);
  const Tensor x = randn({32, 20}).to(gpu), w = (randn({20, 20}) * 0.1).to(gpu);
  // Forward and backward of a chain after a matmul: the gradient's chains fuse too.
  auto step = [&](const std::vector<Tensor>& in) {
    Tensor p = in[1].detach();
    p.set_requires_grad(true);
    Tensor h = matmul(in[0], p);
    Tensor loss = mean(pow(silu(h) * 0.5 + tanh(h), 2.0));
    return std::vector<Tensor>{loss, autograd::grad({loss}, {p})[0]};
  };
  const auto eager = step({x, w});
  auto compiled = jit::compile(step, {x, w});
  const auto got = compiled({x, w});
  expect_close(got[0].to(cpu_device()).reshape({1}), eager[0].to(cpu_device()).reshape({1}), "loss");
  expect_close(got[1].to(cpu_device()), eager[1].to(cpu_device()), "gradient");
}

}  // namespace
}  // namespace kiln

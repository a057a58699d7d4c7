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
  const auto before = cuda::runtime_compile_counts();
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    e.dtype = dtype;
    const std::string source = cuda::fused_kernel_source(e, kinds);
    EXPECT_FALSE(cuda::compile_runtime_source(source, "every_formula", {90, false}).empty());  // an sm_90 cubin
    EXPECT_NE(cuda::compile_runtime_source(source, "every_formula", {75, true}).find(".entry kiln_fused"),
              std::string::npos);  // PTX for the driver to finish
  }
  EXPECT_EQ(cuda::runtime_compile_counts().compiled, before.compiled + 6);
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
#include <cstring>
struct KilnDim { unsigned x; };
static const KilnDim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
struct kiln_bf16 { unsigned short bits; };
struct kiln_half { unsigned short bits; };
inline float kiln_load(float v) { return v; }
inline float kiln_load(kiln_bf16 v) {
  const unsigned u = static_cast<unsigned>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float kiln_load(kiln_half v) {
  _Float16 h;
  std::memcpy(&h, &v.bits, 2);
  return static_cast<float>(h);
}
inline void kiln_store(float* p, float v) { *p = v; }
inline void kiln_store(kiln_bf16* p, float v) {  // round to nearest even, as the device's prelude does
  unsigned u;
  std::memcpy(&u, &v, 4);
  p->bits = (u & 0x7fffffffu) > 0x7f800000u ? static_cast<unsigned short>((u >> 16) | 0x40u)
                                            : static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline void kiln_store(kiln_half* p, float v) {
  const _Float16 h = static_cast<_Float16>(v);
  std::memcpy(&p->bits, &h, 2);
}
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
    Tensor out = Tensor::empty(shape, e.dtype);
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

void expect_close(const Tensor& got, const Tensor& want, const std::string& what, double tolerance = 2e-5) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.to(DType::Float32).to_vector<float>(), w = want.contiguous().to(DType::Float32).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], w[i], tolerance * std::max(1.0f, std::fabs(w[i]))) << what << " element " << i;
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
    const Tensor x = operand_for(o->name, shape), y = abs(operand_for(o->name, {5})) + 0.5, scale = full({}, 1.5);
    const std::vector<Tensor> in = binary ? std::vector<Tensor>{x, y, scale} : std::vector<Tensor>{x, scale};
    const std::vector<Tensor> args = binary ? std::vector<Tensor>{x, y} : std::vector<Tensor>{x};
    wanted.push_back(call(*o, args, attrs).at(0) * scale);
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
  const Tensor stored = rand({4, 1, 3, 2});  // read transposed
  std::vector<Tensor> tree_in{rand(big), rand({3, 1, 1}), stored, rand({4}), full({}, 0.25)};
  const std::vector<FusedInput> tree_kinds = {FusedInput::Dense, FusedInput::Broadcast, FusedInput::Broadcast,
                                              FusedInput::Broadcast, FusedInput::Scalar};
  // The same tree in each 16-bit float: loaded into float, computed there,
  // rounded once on the store (eager mode rounds after every op, hence the
  // tolerance of a few units in the last place).
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    tree.dtype = dtype;
    kernels.push_back({tree, tree_kinds});
    std::vector<Tensor> in;
    for (const Tensor& t : tree_in) in.push_back(t.to(dtype));
    in[2] = in[2].permute({3, 2, 1, 0});
    inputs.push_back(in);
    wanted.push_back(maximum(gelu(in[0] + in[1]) * in[2], in[3] - in[4]));
  }

  HostCompiledKernels compiled(kernels);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const DType dtype = kernels[k].first.dtype;
    const cuda::FusedLaunch plan = cuda::plan_fused_launch(inputs[k], Tensor::empty(wanted[k].shape(), dtype));
    EXPECT_EQ(plan.kinds, kernels[k].second) << "kernel " << k;
    expect_close(compiled.run(k, kernels[k].first, inputs[k], wanted[k].shape()), wanted[k],
                 kernels[k].first.steps[0].op->name + " in " + dtype_name(dtype),
                 dtype == DType::BFloat16  ? 3e-2
                 : dtype == DType::Float16 ? 4e-3
                                           : 2e-5);
  }
}

TEST(CudaFusionSource, SixteenBitStoresRoundAsEagerModeDoes) {
  // One product of two 16-bit operands, computed in float and rounded once
  // by the generated store, is bit for bit eager mode's product: values of
  // every magnitude, halfway cases, float16's largest value and overflows.
  ElementwiseExpression e;
  e.steps = {step("mul", input(0), input(1))};
  std::vector<std::pair<ElementwiseExpression, std::vector<FusedInput>>> kernels;
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    e.dtype = dtype;
    kernels.push_back({e, {FusedInput::Dense, FusedInput::Dense}});
  }
  HostCompiledKernels compiled(kernels);
  const Tensor a = concat({randn({4000}) * 100.0, randn({4000}) * 1e-3, full({4}, 65504.0), full({4}, 1.0)}, 0);
  const Tensor b = concat({randn({8000}), full({4}, 2.0), full({4}, 1.0 + 1.0 / 256 + 1.0 / 512)}, 0);
  for (size_t k = 0; k < kernels.size(); ++k) {
    const DType dtype = kernels[k].first.dtype;
    const std::vector<Tensor> in{a.to(dtype), b.to(dtype)};
    const Tensor got = compiled.run(k, kernels[k].first, in, a.shape());
    EXPECT_EQ(got.to(DType::Float32).to_vector<float>(), (in[0] * in[1]).to(DType::Float32).to_vector<float>())
        << dtype_name(dtype);
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

TEST(CudaFusion, SixteenBitChainsFuseAndMatchEagerWithinTheirPrecision) {
  NEEDS_A_GPU();
  const Device gpu = parse_device("cuda");
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    const Tensor x = randn({128, 96}).to(dtype).to(gpu), b = randn({96}).to(dtype).to(gpu);
    auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{silu(in[0] + in[1]) * in[0] - in[1]}; };
    auto compiled = jit::compile(fn, {x, b});
    const Tensor got = compiled({x, b})[0];
    EXPECT_EQ(got.dtype(), dtype);
    EXPECT_EQ(compiled.report().kernels, 1u) << compiled.graph_text();
    expect_close(got.to(cpu_device()), fn({x, b})[0].to(cpu_device()), dtype_name(dtype),
                 dtype == DType::BFloat16 ? 3e-2 : 4e-3);
  }
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

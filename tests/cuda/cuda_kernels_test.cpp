// The CUDA backend's kernels against the CPU's on the same inputs: every op
// with an elementwise formula (dense, broadcast and strided operands, four
// dtypes), copy between layouts, matmul (transposed views, batches that
// broadcast, 16-bit types) and linear with its bias; then an MLP trained
// eagerly on the GPU, step for step with the CPU. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda/gpus.h"
#include "kiln/kiln.h"
#include "kiln/models.h"

namespace kiln {
namespace {

Device cuda() { return parse_device("cuda"); }

double tolerance(DType d) {
  switch (d) {
    case DType::Float64:
      return 1e-12;
    case DType::Float16:
      return 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    default:
      return 2e-6;  // the GPU's exp, erf, tanh are a few units in the last place from glibc's
  }
}

// Every element of `gpu` (copied back) against `cpu`, relative to the
// larger of 1 and the value.
void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.device(), cuda()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto g = gpu.to(cpu_device()).to(DType::Float64).to_vector<double>();
  const auto c = cpu.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << " element " << i;
      continue;
    }
    ASSERT_NEAR(g[i], c[i], tol * std::max(1.0, std::fabs(c[i]))) << what << " element " << i;
  }
}

// Inputs inside every formula's domain: (0.1, 0.9) takes log, sqrt, asin,
// acos, atanh; acosh's start at 1.
Tensor operand(const std::string& op, const Shape& shape, DType dtype) {
  Tensor x = rand(shape) * 0.8 + 0.1;
  if (op == "acosh") x = x + 1.0;
  return x.to(dtype);
}

TEST(CudaKernels, EveryFormulaMatchesTheCpu) {
  NEEDS_A_GPU();
  manual_seed(3);
  int ops = 0;
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (!op->math || op->math.formula == nullptr) continue;
    ++ops;
    for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
      const std::string what = op->name + " " + dtype_name(dtype);
      if (op->math.arity == 1) {
        Tensor x = operand(op->name, {33, 65}, dtype);
        expect_close(call(op->name, {x.to(cuda())})[0], call(op->name, {x})[0], tolerance(dtype), what + " dense");
        Tensor xt = operand(op->name, {65, 33}, dtype);  // a transposed view
        expect_close(call(op->name, {xt.to(cuda()).t()})[0], call(op->name, {xt.t()})[0], tolerance(dtype),
                     what + " transposed");
        continue;
      }
      Tensor a = operand(op->name, {33, 65}, dtype), b = operand(op->name, {33, 65}, dtype);
      Tensor row = operand(op->name, {65}, dtype), col = operand(op->name, {33, 1}, dtype);
      expect_close(call(op->name, {a.to(cuda()), b.to(cuda())})[0], call(op->name, {a, b})[0], tolerance(dtype),
                   what + " dense");
      expect_close(call(op->name, {a.to(cuda()), row.to(cuda())})[0], call(op->name, {a, row})[0], tolerance(dtype),
                   what + " row broadcast");
      expect_close(call(op->name, {col.to(cuda()), row.to(cuda())})[0], call(op->name, {col, row})[0], tolerance(dtype),
                   what + " outer broadcast");
    }
  }
  EXPECT_GT(ops, 40);
  // Attributes reach the device: the functor is built from them on the host.
  Tensor x = randn({4, 50}) * 3;
  const std::vector<std::pair<std::string, Attrs>> with_attrs = {{"leaky_relu", {{"negative_slope", 0.2}}},
                                                                 {"gelu", {{"approximate", std::string("tanh")}}},
                                                                 {"clamp", {{"min", -0.5}, {"max", 0.75}}},
                                                                 {"softplus", {{"beta", 2.0}, {"threshold", 5.0}}}};
  for (const auto& [op, attrs] : with_attrs)
    expect_close(call(op, {x.to(cuda())}, attrs)[0], call(op, {x}, attrs)[0], tolerance(DType::Float32), op);
}

TEST(CudaKernels, ElementwiseOpsRunOnTheGpuWithoutFallingBack) {
  NEEDS_A_GPU();
  const int64_t before = fallback_count();
  Tensor x = randn({1000}).to(cuda());
  Tensor y = relu(x * 2.0 + x) - sigmoid(x) / exp(x);
  EXPECT_EQ(y.device(), cuda());
  EXPECT_EQ(fallback_count(), before);
}

TEST(CudaKernels, CopyBetweenLayoutsOfAnyDtype) {
  NEEDS_A_GPU();
  for (DType dtype : {DType::Float32, DType::Float16, DType::Int64, DType::UInt8, DType::Bool}) {
    Tensor x = (randn({6, 7, 5}) * 10).to(dtype);
    Tensor view = x.to(cuda()).permute({2, 0, 1});
    Tensor dense = view.contiguous();
    EXPECT_TRUE(dense.is_contiguous());
    EXPECT_EQ(dense.to(cpu_device()).to(DType::Float64).to_vector<double>(),
              x.permute({2, 0, 1}).contiguous().to(DType::Float64).to_vector<double>())
        << dtype_name(dtype);
  }
}

double matmul_tolerance(DType d, int64_t k) {
  // float32 GEMMs accumulate in float32 (no TF32), in another order than the CPU's.
  const double unit = d == DType::Float64 ? 1e-15 : d == DType::Float32 ? 1e-7 : d == DType::Float16 ? 1e-3 : 8e-3;
  return unit * 4 * std::sqrt(static_cast<double>(k)) * 8;
}

TEST(CudaKernels, MatmulMatchesTheCpuOverLayoutsBatchesAndDtypes) {
  NEEDS_A_GPU();
  manual_seed(4);
  struct Case {
    Shape a, b;
    bool transpose_a, transpose_b;
  };
  const std::vector<Case> cases = {
      {{7, 13}, {13, 5}, false, false},    {{64, 128}, {128, 32}, false, false},
      {{13, 7}, {13, 5}, true, false},     {{7, 13}, {5, 13}, false, true},
      {{3, 17, 9}, {9, 4}, false, false},  {{2, 1, 5, 6}, {3, 6, 7}, false, false},
      {{4, 9, 3}, {4, 9, 8}, true, false}, {{1, 300}, {300, 1}, false, false},
  };
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Case& c : cases) {
      Tensor a = randn(c.a).to(dtype), b = randn(c.b).to(dtype);
      auto prepare = [](const Tensor& t, bool transpose) { return transpose ? t.transpose(-1, -2) : t; };
      Tensor ga = prepare(a.to(cuda()), c.transpose_a), gb = prepare(b.to(cuda()), c.transpose_b);
      Tensor expect =
          matmul(prepare(a, c.transpose_a).to(DType::Float64), prepare(b, c.transpose_b).to(DType::Float64));
      const int64_t k = ga.shape().back();
      expect_close(matmul(ga, gb).to(DType::Float64), expect, matmul_tolerance(dtype, k),
                   std::string(dtype_name(dtype)) + " " + shape_str(c.a) + " @ " + shape_str(c.b));
    }
  }
}

TEST(CudaKernels, LinearWithItsBiasInTheEpilogue) {
  NEEDS_A_GPU();
  manual_seed(5);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    Tensor x = randn({3, 10, 48}).to(dtype), w = randn({24, 48}).to(dtype), b = randn({24}).to(dtype);
    const double tol = matmul_tolerance(dtype, 48);
    const std::string what = dtype_name(dtype);
    expect_close(linear(x.to(cuda()), w.to(cuda()), b.to(cuda())).to(DType::Float64),
                 linear(x.to(DType::Float64), w.to(DType::Float64), b.to(DType::Float64)), tol, what + " with bias");
    expect_close(linear(x.to(cuda()), w.to(cuda()), Tensor()).to(DType::Float64),
                 linear(x.to(DType::Float64), w.to(DType::Float64), Tensor()), tol, what + " without");
    Tensor xt = randn({48, 30}).to(dtype);  // a strided input: gathered first
    expect_close(linear(xt.to(cuda()).t(), w.to(cuda()), b.to(cuda())).to(DType::Float64),
                 linear(xt.t().to(DType::Float64), w.to(DType::Float64), b.to(DType::Float64)), tol, what + " strided");
  }
}

// W1's model, trained eagerly on the GPU and on the CPU from the same
// weights and batches: the same losses step by step (what the GPU lacks
// runs on the CPU, visibly).
TEST(CudaKernels, AnMlpTrainsOnTheGpuWithTheCpusLosses) {
  NEEDS_A_GPU();
  auto train = [](Device device) {
    manual_seed(6);
    models::ModelConfig config;
    config.hidden = {64, 32};
    auto net = models::make_model("mlp", config);
    net->to(device);
    optim::SGD opt(net->trainable_params(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    std::vector<double> losses;
    manual_seed(7);
    for (int step = 0; step < 20; ++step) {
      Tensor x = randn({32, 1, 28, 28}), y = randint(0, 10, {32});
      Tensor loss = cross_entropy((*net)(x.to(device)), y.to(device));
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  };
  const auto cpu = train(cpu_device()), gpu = train(cuda());
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::fabs(cpu[i])) << "step " << i + 1;
}

}  // namespace
}  // namespace kiln

// The CUDA backend's kernels against the CPU's on the same inputs: every op
// with an elementwise formula (dense, broadcast and strided operands, four
// dtypes), copy between layouts, matmul (transposed views, batches that
// broadcast, 16-bit types), linear with its bias, attention, convolutions
// (transposed too), max and adaptive average pooling, sums and means,
// softmax, layer and batch norm, dropout, embedding, cross entropy with its gradient, the SGD,
// Adam and RMSProp updates; then W1's MLP, W2's CNN and W3's ResNet-8 trained
// eagerly on the GPU, step for step with the CPU and without falling back.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

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

TEST(CudaKernels, SumAndMeanOverAnyAxes) {
  NEEDS_A_GPU();
  manual_seed(8);
  const std::vector<std::pair<std::vector<int64_t>, bool>> cases = {{{}, false}, {{0}, false},   {{1, 2}, false},
                                                                    {{2}, true}, {{0, 2}, true}, {{-1}, false}};
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor x = randn({4, 50, 6}).to(dtype);
    for (const Tensor& input : {x, x.transpose(0, 2)}) {
      Tensor on_gpu = input.is_contiguous() ? input.to(cuda()) : x.to(cuda()).transpose(0, 2);
      for (const auto& [axes, keepdim] : cases) {
        const std::string what = std::string(dtype_name(dtype)) + " over " + std::to_string(axes.size()) + " axes";
        const double tol = dtype == DType::Float64 ? 1e-12 : dtype == DType::Float32 ? 1e-5 : 2e-2;
        expect_close(sum(on_gpu, axes, keepdim).to(DType::Float64), sum(input.to(DType::Float64), axes, keepdim),
                     tol * 16, "sum " + what);
        expect_close(mean(on_gpu, axes, keepdim).to(DType::Float64), mean(input.to(DType::Float64), axes, keepdim), tol,
                     "mean " + what);
      }
    }
  }
}

TEST(CudaKernels, SoftmaxOverAnyAxisAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(15);
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    const double tol = dtype == DType::Float64   ? 1e-12
                       : dtype == DType::Float32 ? 1e-6
                       : dtype == DType::Float16 ? 2e-3
                                                 : 1.6e-2;
    Tensor x = (randn({7, 300, 5}) * 4).to(dtype);
    for (int64_t axis : {0, 1, -1}) {
      for (bool log : {false, true}) {
        const std::string what =
            std::string(log ? "log_softmax " : "softmax ") + dtype_name(dtype) + " axis " + std::to_string(axis);
        auto run = [&](Device device) {
          Tensor xd = x.to(device).detach();
          xd.set_requires_grad();
          Tensor y = log ? log_softmax(xd, axis) : softmax(xd, axis);
          sum(y * y).backward();
          return std::make_pair(y.detach(), xd.grad());
        };
        const auto [gy, gg] = run(cuda());
        const auto [cy, cg] = run(cpu_device());
        expect_close(gy, cy, tol, what);
        expect_close(gg, cg, tol * 4, what + " gradient");
      }
    }
  }
}

TEST(CudaKernels, LayerNormAndItsGradientsMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(16);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (bool affine : {false, true}) {
      for (int64_t ndim : {1, 2}) {
        Tensor x = (randn({6, 7, 96}) * 3 + 1).to(dtype);
        const Shape norm(x.shape().end() - ndim, x.shape().end());
        Tensor w = (randn(norm) + 1).to(dtype), b = randn(norm).to(dtype);
        auto run = [&](Device device) {
          Tensor xd = x.to(device).detach(), wd = w.to(device).detach(), bd = b.to(device).detach();
          for (Tensor* p : {&xd, &wd, &bd}) p->set_requires_grad();
          const std::vector<Tensor> y = call("layer_norm", {xd, affine ? wd : Tensor(), affine ? bd : Tensor()},
                                             {{"normalized_ndim", ndim}, {"eps", 1e-5}});
          sum(y[0] * y[0] * y[0]).backward();
          std::vector<Tensor> r{y[0].detach(), y[1], y[2], xd.grad()};
          if (affine) r.insert(r.end(), {wd.grad(), bd.grad()});
          return r;
        };
        const auto gpu = run(cuda()), cpu = run(cpu_device());
        const std::string what = std::string(dtype_name(dtype)) + (affine ? " affine" : "") + " over " +
                                 std::to_string(ndim) + " axes, output ";
        const double tol = dtype == DType::Float64 ? 1e-11 : 1e-4;
        for (size_t i = 0; i < gpu.size(); ++i) expect_close(gpu[i], cpu[i], tol, what + std::to_string(i));
      }
    }
  }
}

TEST(CudaKernels, EmbeddingAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(17);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor table = randn({50, 24}).to(dtype);
    Tensor indices = randint(-50, 50, {4, 33});  // negative ones count from the end; repeats add up
    for (int64_t padding : {int64_t{-1}, int64_t{7}}) {
      auto run = [&](Device device) {
        Tensor t = table.to(device).detach();
        t.set_requires_grad();
        Tensor y = call("embedding", {t, indices.to(device)}, {{"padding_idx", padding}})[0];
        sum(y * y).backward();
        return std::make_pair(y.detach(), t.grad());
      };
      const auto [gy, gg] = run(cuda());
      const auto [cy, cg] = run(cpu_device());
      const std::string what = std::string(dtype_name(dtype)) + " padding_idx " + std::to_string(padding);
      expect_close(gy, cy, 0, what + " rows");
      expect_close(gg, cg, dtype == DType::Float64 ? 1e-12 : 1e-5, what + " gradient");  // (added in any order)
    }
  }
}

TEST(CudaKernels, AttentionAndItsGradientsMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(18);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    const double tol = dtype == DType::Float64 ? 1e-10 : dtype == DType::Float32 ? 1e-4 : 5e-2;
    for (bool causal : {false, true}) {
      for (bool masked : {false, true}) {
        const int64_t l = 17, s = causal ? 17 : 13;
        Tensor q = randn({2, 3, l, 8}), k = randn({2, 3, s, 8}), v = randn({2, 3, s, 5});
        Tensor mask = where(lt(rand({l, s}), full({l, s}, 0.2)), full({l, s}, -std::numeric_limits<double>::infinity()),
                            zeros({l, s}));
        auto run = [&](Device device, DType t) {
          std::vector<Tensor> in{q.to(t).to(device).detach(), k.to(t).to(device).detach(), v.to(t).to(device).detach()};
          for (Tensor& x : in) x.set_requires_grad();
          Tensor y =
              scaled_dot_product_attention(in[0], in[1], in[2], masked ? mask.to(t).to(device) : Tensor(), causal);
          sum(y * y).backward();
          return std::vector<Tensor>{y.detach(), in[0].grad(), in[1].grad(), in[2].grad()};
        };
        const auto gpu = run(cuda(), dtype), cpu = run(cpu_device(), DType::Float64);
        const std::string what = std::string(dtype_name(dtype)) + (causal ? " causal" : "") + (masked ? " masked" : "");
        for (size_t i = 0; i < gpu.size(); ++i)
          expect_close(gpu[i].to(DType::Float64), cpu[i], tol, what + " output " + std::to_string(i));
      }
    }
  }
}

// Training (the running statistics updated in place) and eval, values and gradients.
TEST(CudaKernels, BatchNormAndItsGradientsMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(19);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (bool training : {true, false}) {
      Tensor x = (randn({4, 6, 5, 7}) * 2 + 3).to(dtype), w = (rand({6}) + 0.5).to(dtype), b = randn({6}).to(dtype);
      Tensor mean = randn({6}).to(dtype), var = (rand({6}) + 0.5).to(dtype);
      auto run = [&](Device device) {
        Tensor xd = x.to(device).detach(), wd = w.to(device).detach(), bd = b.to(device).detach();
        for (Tensor* p : {&xd, &wd, &bd}) p->set_requires_grad();
        Tensor rm = mean.to(device).detach().clone(), rv = var.to(device).detach().clone();
        const std::vector<Tensor> y =
            call("batch_norm", {xd, wd, bd, rm, rv}, {{"training", training}, {"momentum", 0.1}, {"eps", 1e-5}});
        sum(y[0] * y[0] * y[0]).backward();
        return std::vector<Tensor>{y[0].detach(), xd.grad(), wd.grad(), bd.grad(), rm, rv};
      };
      const auto gpu = run(cuda()), cpu = run(cpu_device());
      const std::string what = std::string(dtype_name(dtype)) + (training ? " training" : " eval") + ", output ";
      const double tol = dtype == DType::Float64 ? 1e-10 : 1e-4;
      for (size_t i = 0; i < gpu.size(); ++i) expect_close(gpu[i], cpu[i], tol, what + std::to_string(i));
    }
  }
}

// One seed, one mask: philox's numbers on the GPU are the CPU's.
TEST(CudaKernels, DropoutDrawsTheCpusMaskForOneSeed) {
  NEEDS_A_GPU();
  for (DType dtype : {DType::Float32, DType::Float64}) {
    Tensor x = randn({37, 129}).to(dtype);
    auto run = [&](Device device) {
      manual_seed(21);
      const std::vector<Tensor> y = call("dropout", {x.to(device)}, {{"p", 0.3}, {"training", true}});
      return std::make_pair(y[0], y[1]);
    };
    const auto [gy, gm] = run(cuda());
    const auto [cy, cm] = run(cpu_device());
    expect_close(gm, cm, 0, std::string(dtype_name(dtype)) + " mask");
    expect_close(gy, cy, 0, std::string(dtype_name(dtype)) + " output");
    const double kept = mean(ne(cm, zeros({}, dtype)).to(DType::Float64)).item<double>();
    EXPECT_NEAR(kept, 0.7, 0.03);
  }
}

TEST(CudaKernels, CrossEntropyAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(9);
  for (int64_t classes : {10, 1000}) {
    Tensor logits = randn({37, classes}) * 3, target = randint(0, classes, {37});
    for (int64_t i = 0; i < 37; i += 7) target.data<int64_t>()[i] = -100;  // some ignored
    Tensor weight = rand({classes}) + 0.5;
    for (const char* reduction : {"mean", "sum", "none"}) {
      for (double smoothing : {0.0, 0.1}) {
        for (bool weighted : {false, true}) {
          CrossEntropyOptions o;
          o.reduction = reduction;
          o.label_smoothing = smoothing;
          if (weighted) o.weight = weight;
          const std::string what = std::string(reduction) + " smoothing " + std::to_string(smoothing) +
                                   (weighted ? " weighted" : "") + " over " + std::to_string(classes) + " classes";
          Tensor x_cpu = logits.detach();
          x_cpu.set_requires_grad();
          Tensor loss_cpu = cross_entropy(x_cpu, target, o);
          sum(loss_cpu).backward();
          CrossEntropyOptions og = o;
          if (weighted) og.weight = weight.to(cuda());
          Tensor x_gpu = logits.to(cuda()).detach();
          x_gpu.set_requires_grad();
          const int64_t before = fallback_count();
          Tensor loss_gpu = cross_entropy(x_gpu, target.to(cuda()), og);
          sum(loss_gpu).backward();
          EXPECT_EQ(fallback_count(), before) << what;
          expect_close(loss_gpu.detach(), loss_cpu.detach(), 1e-5, "loss " + what);
          expect_close(x_gpu.grad(), x_cpu.grad(), 1e-5, "gradient " + what);
        }
      }
    }
  }
}

// The fused updates, three steps from one start with the same gradients.
TEST(CudaKernels, OptimizerUpdatesLikeTheCpu) {
  NEEDS_A_GPU();
  manual_seed(10);
  Tensor start = randn({300, 7});
  std::vector<Tensor> grads;
  for (int i = 0; i < 3; ++i) grads.push_back(randn({300, 7}));
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const Tensor&)>;
  const std::vector<std::pair<std::string, MakeOptimizer>> optimizers = {
      {"sgd",
       [](const Tensor& p) {
         return std::make_unique<optim::SGD>(std::vector<Tensor>{p},
                                             optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"nesterov",
       [](const Tensor& p) {
         return std::make_unique<optim::SGD>(
             std::vector<Tensor>{p},
             optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"adam",
       [](const Tensor& p) {
         return std::make_unique<optim::Adam>(std::vector<Tensor>{p},
                                              optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01});
       }},
      {"adamw",
       [](const Tensor& p) {
         return std::make_unique<optim::Adam>(
             std::vector<Tensor>{p},
             optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01, .decoupled_weight_decay = true});
       }},
      {"rmsprop", [](const Tensor& p) {
         return std::make_unique<optim::RMSProp>(
             std::vector<Tensor>{p}, optim::RMSPropOptions{.lr = 0.01, .weight_decay = 0.01, .momentum = 0.9});
       }}};
  for (const auto& [name, make] : optimizers) {
    auto run = [&, &make = make](Device device) {
      Tensor p = start.to(device).detach();
      p.set_requires_grad();
      auto opt = make(p);
      for (const Tensor& g : grads) {
        opt->zero_grad();
        sum(p * g.to(device)).backward();  // p's gradient: g
        opt->step();
      }
      return p.detach();
    };
    const int64_t before = fallback_count();
    const Tensor on_gpu = run(cuda());
    EXPECT_EQ(fallback_count(), before) << name;
    expect_close(on_gpu, run(cpu_device()), 1e-6, name);
  }
}

// A group of parameters goes to one multi-tensor launch (sgd_update_many,
// adam_update_many, rmsprop_update_many), 30 of them here (two launches of up to 24), of sizes
// from one element to more blocks than one launch gives a tensor: the
// CPU's values, and no fallback.
TEST(CudaKernels, AGroupsUpdateInOneLaunchMatchesTheCpu) {
  NEEDS_A_GPU();
  manual_seed(12);
  std::vector<Tensor> start;
  for (int i = 0; i < 30; ++i) start.push_back(randn({i == 7 ? 300000 : 1 + 37 * i}));
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;
  const std::vector<std::pair<std::string, MakeOptimizer>> optimizers = {
      {"sgd",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
       }},
      {"sgd without momentum",
       [](const std::vector<Tensor>& p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1}); }},
      {"adamw",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::Adam>(
             p, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01, .decoupled_weight_decay = true});
       }},
      {"rmsprop",
       [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::RMSProp>(
             p, optim::RMSPropOptions{.lr = 0.01, .weight_decay = 0.01, .momentum = 0.9});
       }},
      {"rmsprop without momentum", [](const std::vector<Tensor>& p) {
         return std::make_unique<optim::RMSProp>(p, optim::RMSPropOptions{.lr = 0.01});
       }}};
  for (const auto& [name, make] : optimizers) {
    auto run = [&, &make = make](Device device) {
      std::vector<Tensor> params;
      for (const Tensor& s : start) params.push_back(s.to(device).detach().set_requires_grad());
      auto opt = make(params);
      for (int step = 0; step < 3; ++step) {
        opt->zero_grad();
        Tensor loss = zeros({}, DType::Float32, device);
        for (const Tensor& p : params) loss = loss + sum(p * p);  // each gradient: 2 p
        loss.backward();
        opt->step();
      }
      return params;
    };
    const int64_t before = fallback_count();
    const std::vector<Tensor> on_gpu = run(cuda());
    EXPECT_EQ(fallback_count(), before) << name;
    const std::vector<Tensor> on_cpu = run(cpu_device());
    for (size_t i = 0; i < on_gpu.size(); ++i)
      expect_close(on_gpu[i], on_cpu[i], 1e-6, name + " parameter " + std::to_string(i));
  }
}

// Forward and both gradients against the CPU in float64 (cuDNN's float32
// runs without TF32), over padding, stride, dilation, groups, a bias and a
// strided input. Skipped in a build without cuDNN (no conv2d kernel).
TEST(CudaKernels, ConvolutionsAndTheirGradientsMatchTheCpu) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  manual_seed(11);
  struct Case {
    Shape x, w;
    ConvOptions o;
  };
  const std::vector<Case> cases = {{{2, 3, 17, 15}, {8, 3, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1, {0, 0}}},
                                   {{1, 8, 16, 16}, {16, 8, 1, 1}, {{2, 2}, {0, 0}, {1, 1}, 1, {0, 0}}},
                                   {{2, 8, 12, 12}, {8, 1, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 8, {0, 0}}},
                                   {{3, 6, 9, 9}, {12, 3, 5, 5}, {{2, 2}, {2, 2}, {1, 1}, 2, {0, 0}}}};
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Case& c : cases) {
      Tensor x = randn(c.x), w = randn(c.w) * 0.3, b = randn({c.w[0]});
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w);
      const double tol = dtype == DType::Float64   ? 1e-10
                         : dtype == DType::Float32 ? 1e-4
                         : dtype == DType::Float16 ? 1e-2
                                                   : 6e-2;
      auto run = [&](Device device, DType t) {
        Tensor xd = x.to(t).to(device).detach(), wd = w.to(t).to(device).detach(), bd = b.to(t).to(device).detach();
        for (Tensor* p : {&xd, &wd, &bd}) p->set_requires_grad();
        Tensor y = relu(conv2d(xd, wd, bd, c.o));
        sum(y * y).backward();
        return std::vector<Tensor>{y.detach(), xd.grad(), wd.grad(), bd.grad()};
      };
      const auto gpu = run(cuda(), dtype), cpu = run(cpu_device(), DType::Float64);
      const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
      for (size_t i = 0; i < gpu.size(); ++i) {
        const double scale = std::max(1.0, amax(abs(cpu[i])).item<double>());
        expect_close(gpu[i].to(DType::Float64) / scale, cpu[i] / scale, tol, what + " " + names[i]);
      }
    }
  }
  // A strided (transposed) input is read as it lies.
  Tensor x = randn({2, 4, 10, 9}), w = randn({5, 4, 3, 3});
  expect_close(conv2d(x.to(cuda()).transpose(2, 3), w.to(cuda())), conv2d(x.transpose(2, 3), w), 1e-4, "strided input");
}

// Transposed convolutions (cuDNN's backward-data pass): strides with output
// padding, groups, dilation, a bias; their gradients through conv2d.
TEST(CudaKernels, TransposedConvolutionsAndTheirGradientsMatchTheCpu) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  manual_seed(13);
  struct Case {
    Shape x, w;
    ConvOptions o;
  };
  const std::vector<Case> cases = {{{2, 8, 7, 7}, {8, 4, 2, 2}, {{2, 2}, {0, 0}, {1, 1}, 1, {0, 0}}},
                                   {{1, 6, 5, 6}, {6, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1, {1, 1}}},
                                   {{2, 4, 6, 6}, {4, 2, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 2, {0, 0}}}};
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    for (const Case& c : cases) {
      const Tensor x = randn(c.x), w = randn(c.w) * 0.3, b = randn({c.w[1] * c.o.groups});
      const std::string what = std::string(dtype_name(dtype)) + " x " + shape_str(c.x) + " w " + shape_str(c.w);
      auto run = [&](Device device, DType t) {
        Tensor xd = x.to(t).to(device).detach(), wd = w.to(t).to(device).detach(), bd = b.to(t).to(device).detach();
        for (Tensor* p : {&xd, &wd, &bd}) p->set_requires_grad();
        Tensor y = conv_transpose2d(xd, wd, bd, c.o);
        sum(y * y).backward();
        return std::vector<Tensor>{y.detach(), xd.grad(), wd.grad(), bd.grad()};
      };
      const int64_t before = fallback_count();
      const auto gpu = run(cuda(), dtype);
      EXPECT_EQ(fallback_count(), before) << what;
      const auto cpu = run(cpu_device(), DType::Float64);
      const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
      for (size_t i = 0; i < gpu.size(); ++i) {
        const double scale = std::max(1.0, amax(abs(cpu[i])).item<double>());
        expect_close(gpu[i].to(DType::Float64) / scale, cpu[i] / scale, dtype == DType::Float32 ? 1e-4 : 6e-2,
                     what + " " + names[i]);
      }
    }
  }
}

TEST(CudaKernels, MaxPoolingAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(12);
  const std::vector<std::vector<int64_t>> windows = {{2, 2, 0}, {3, 2, 1}, {3, 1, 1}};  // kernel, stride, padding
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const auto& k : windows) {
      Tensor x = randn({2, 3, 11, 12}).to(dtype);
      auto run = [&](Device device) {
        Tensor xd = x.to(device).detach();
        xd.set_requires_grad();
        const std::vector<Tensor> y = call("max_pool2d", {xd},
                                           {{"kernel", std::vector<int64_t>{k[0], k[0]}},
                                            {"stride", std::vector<int64_t>{k[1], k[1]}},
                                            {"padding", std::vector<int64_t>{k[2], k[2]}}});
        sum(y[0] * y[0]).backward();
        return std::vector<Tensor>{y[0].detach(), y[1], xd.grad()};
      };
      const auto gpu = run(cuda()), cpu = run(cpu_device());
      const std::string what = std::string(dtype_name(dtype)) + " kernel " + std::to_string(k[0]);
      expect_close(gpu[0], cpu[0], 0, what + " values");
      EXPECT_EQ(gpu[1].to(cpu_device()).to_vector<int64_t>(), cpu[1].to_vector<int64_t>()) << what << " indices";
      expect_close(gpu[2], cpu[2], 1e-12, what + " gradient");
    }
  }
}

TEST(CudaKernels, AdaptiveAveragePoolingAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(20);
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const std::vector<int64_t>& size : {std::vector<int64_t>{1, 1}, std::vector<int64_t>{3, 2}}) {
      Tensor x = randn({2, 3, 7, 9}).to(dtype);
      auto run = [&](Device device) {
        Tensor xd = x.to(device).detach();
        xd.set_requires_grad();
        Tensor y = adaptive_avg_pool2d(xd, size);
        sum(y * y).backward();
        return std::make_pair(y.detach(), xd.grad());
      };
      const auto [gy, gg] = run(cuda());
      const auto [cy, cg] = run(cpu_device());
      const std::string what = std::string(dtype_name(dtype)) + " to " + shape_str(size);
      const double tol = dtype == DType::Float64 ? 1e-12 : 1e-6;
      expect_close(gy, cy, tol, what);
      expect_close(gg, cg, tol, what + " gradient");
    }
  }
}

// A model of the zoo trained eagerly with SGD on `device` from one seed's
// weights and batches [batch, 1, 28, 28]: the loss of every step.
std::vector<double> train_eagerly(const std::string& model, const models::ModelConfig& config, Device device,
                                  int64_t batch, int steps, double lr) {
  manual_seed(6);
  auto net = models::make_model(model, config);
  net->to(device);
  optim::SGD opt(net->trainable_params(), optim::SGDOptions{.lr = lr, .momentum = 0.9});
  std::vector<double> losses;
  manual_seed(7);
  for (int step = 0; step < steps; ++step) {
    Tensor x = randn({batch, 1, 28, 28}), y = randint(0, 10, {batch});
    Tensor loss = cross_entropy((*net)(x.to(device)), y.to(device));
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// The same model trained on the GPU and on the CPU: the same losses step by
// step, and nothing of the GPU's steps on the CPU.
void expect_trains_like_the_cpu(const std::string& model, const models::ModelConfig& config, int64_t batch, int steps,
                                double lr, double tol) {
  const auto cpu = train_eagerly(model, config, cpu_device(), batch, steps, lr);
  const int64_t before = fallback_count();
  const auto gpu = train_eagerly(model, config, cuda(), batch, steps, lr);
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], tol * std::fabs(cpu[i])) << model << " step " << i + 1;
  EXPECT_EQ(fallback_count(), before) << "ops of " << model << "'s step ran on the CPU: see the warnings above";
}

// W1's MLP.
TEST(CudaKernels, AnMlpTrainsOnTheGpuWithTheCpusLosses) {
  NEEDS_A_GPU();
  models::ModelConfig config;
  config.hidden = {64, 32};
  expect_trains_like_the_cpu("mlp", config, 32, 20, 0.05, 1e-4);
}

// W3's ResNet-8: convolutions, batch norm, residual adds, global pooling.
TEST(CudaKernels, AResNetTrainsOnTheGpuWithTheCpusLosses) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  expect_trains_like_the_cpu("resnet8", {}, 8, 5, 0.02, 2e-3);
}

// W2's CNN (cuDNN's convolutions sum in another order than oneDNN's).
TEST(CudaKernels, TheCnnTrainsOnTheGpuWithTheCpusLosses) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  expect_trains_like_the_cpu("cnn", {}, 16, 10, 0.02, 1e-3);
}

}  // namespace
}  // namespace kiln

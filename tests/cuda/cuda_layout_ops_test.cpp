// The CUDA backend's kernels of every dtype against the CPU's, exactly:
// casts between every pair of dtypes, comparisons and where with broadcast
// operands, tril/triu, concat, assign, pad in every mode with its gradient,
// slices' gradients, integer arithmetic and mod, the reductions that keep
// an order (argmax's ties and NaN, amax, prod, integer sums), all_finite,
// the indexing ops and topk, indices out of range (and integer division by
// zero) raised as the CPU would, interpolate; then W4's Transformer and W2's
// CNN in bfloat16 autocast trained on the GPU like the CPU, without falling
// back. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda/gpus.h"
#include "kiln/kiln.h"
#include "kiln/models.h"

namespace kiln {
namespace {

Device cuda() { return parse_device("cuda"); }

const DType kAll[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32,
                      DType::Int64,   DType::UInt8,   DType::Bool,    DType::Int8};

// gpu (copied back) equals cpu element for element, NaN where it is NaN.
void expect_same(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.device(), cuda()) << what;
  ASSERT_EQ(gpu.dtype(), cpu.dtype()) << what;
  ASSERT_EQ(gpu.shape(), cpu.shape()) << what;
  const auto g = gpu.to(cpu_device()).to(DType::Float64).to_vector<double>();
  const auto c = cpu.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    if (std::isnan(c[i]))
      ASSERT_TRUE(std::isnan(g[i])) << what << " element " << i;
    else
      ASSERT_EQ(g[i], c[i]) << what << " element " << i;
  }
}

// Values every dtype holds exactly enough to compare: integers in [-6, 6]
// and halves, some zeros.
Tensor small_values(const Shape& shape) { return round(randn(shape) * 6.0) * 0.5; }

TEST(CudaLayoutOps, CastBetweenEveryPairOfDtypes) {
  NEEDS_A_GPU();
  manual_seed(1);
  const Tensor base = small_values({7, 9});
  for (DType from : kAll) {
    for (DType to : kAll) {
      // A negative float cast to uint8 is undefined in C++ (the CPU wraps, the GPU saturates): none here.
      const bool unsigned_end = from == DType::UInt8 || (to == DType::UInt8 && is_floating(from));
      const Tensor x = unsigned_end ? abs(base).to(from) : base.to(from);
      const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      expect_same(cast(x.to(cuda()).t(), to), cast(x.t(), to), what);  // from a transposed view
    }
  }
}

TEST(CudaLayoutOps, ComparisonsAndWhereBroadcast) {
  NEEDS_A_GPU();
  manual_seed(2);
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64, DType::Int8}) {
    const Tensor a = small_values({5, 6}).to(dtype), b = small_values({6}).to(dtype);
    const Tensor ga = a.to(cuda()), gb = b.to(cuda());
    const std::string d = dtype_name(dtype);
    expect_same(eq(ga, gb), eq(a, b), "eq " + d);
    expect_same(ne(ga, gb), ne(a, b), "ne " + d);
    expect_same(lt(ga, gb), lt(a, b), "lt " + d);
    expect_same(le(ga, gb), le(a, b), "le " + d);
    expect_same(gt(ga, gb), gt(a, b), "gt " + d);
    expect_same(ge(ga, gb), ge(a, b), "ge " + d);
    const Tensor cond = gt(small_values({5, 1}), zeros({}));
    expect_same(where(cond.to(cuda()), ga, gb), where(cond, a, b), "where " + d);
  }
  Tensor x = small_values({3, 4, 5});
  for (int64_t diagonal : {-1, 0, 2}) {
    expect_same(tril(x.to(cuda()), diagonal), tril(x, diagonal), "tril");
    expect_same(triu(x.to(cuda()).transpose(1, 2), diagonal), triu(x.transpose(1, 2), diagonal), "triu of a view");
  }
}

TEST(CudaLayoutOps, ConcatAssignPadAndTheirGradients) {
  NEEDS_A_GPU();
  manual_seed(3);
  const Tensor a = randn({2, 3, 4}), b = randn({2, 5, 4}), c = randn({4, 2, 2}).permute({1, 0, 2});  // [2, 4, 2]
  expect_same(concat({a.to(cuda()), b.to(cuda())}, 1), concat({a, b}, 1), "concat along 1");
  const Tensor ct = randn({2, 3, 2});
  expect_same(concat({c.to(cuda()), ct.to(cuda())}, 1), concat({c, ct}, 1), "concat of a permuted view");
  expect_same(concat({a.to(DType::Int64).to(cuda()), a.to(DType::Int64).to(cuda())}, 0),
              concat({a.to(DType::Int64), a.to(DType::Int64)}, 0), "concat of int64");

  Tensor dst = zeros({3, 4}), gdst = zeros({3, 4}).to(cuda());
  const Tensor row = randn({4});
  dst.copy_(row);
  gdst.copy_(row.to(cuda()));
  expect_same(gdst, dst, "assign of a broadcast row");

  const Tensor x = randn({2, 3, 5, 6});
  for (const std::string mode : {"constant", "reflect", "replicate", "circular"}) {
    const std::vector<int64_t> pads{2, 1, 1, 3};
    expect_same(pad(x.to(cuda()), pads, mode, 0.5), pad(x, pads, mode, 0.5), "pad " + mode);
    Tensor xc = x.clone().set_requires_grad(true), xg = x.to(cuda()).set_requires_grad(true);
    const Tensor up = randn(pad(x, pads, mode).shape());
    sum(pad(xc, pads, mode) * up).backward();
    sum(pad(xg, pads, mode) * up.to(cuda())).backward();
    const auto g = xg.grad().to(cpu_device()).to_vector<float>(), want = xc.grad().to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], 1e-5) << "pad gradient " << mode << " " << i;
  }
  expect_same(pad(x.to(cuda()), {-1, -2}), pad(x, {-1, -2}), "negative pads crop");

  Tensor s = x.clone().set_requires_grad(true), sg = x.to(cuda()).set_requires_grad(true);
  sum(s.slice(3, 1, 6, 2) * 3.0).backward();
  sum(sg.slice(3, 1, 6, 2) * 3.0).backward();
  expect_same(sg.grad(), s.grad(), "slice gradient");
}

TEST(CudaLayoutOps, ReductionsKeepTheCpusOrderTiesAndNaN) {
  NEEDS_A_GPU();
  manual_seed(4);
  Tensor x = small_values({6, 300});  // many ties
  std::vector<float> v = x.to_vector<float>();
  v[2 * 300 + 7] = std::numeric_limits<float>::quiet_NaN();
  v[2 * 300 + 250] = std::numeric_limits<float>::quiet_NaN();
  x = from_vector<float>(v, {6, 300});
  for (DType dtype : {DType::Float32, DType::Float16, DType::Int32, DType::Int8}) {
    const Tensor t = x.to(dtype), g = t.to(cuda());
    const std::string d = dtype_name(dtype);
    for (int64_t axis : {0, 1}) {
      expect_same(argmax(g, axis), argmax(t, axis), "argmax " + d);
      expect_same(argmin(g, axis, true), argmin(t, axis, true), "argmin " + d);
      expect_same(amax(g, {axis}), amax(t, {axis}), "amax " + d);
      expect_same(amin(g.t(), {1 - axis}), amin(t.t(), {1 - axis}), "amin of a view " + d);
    }
  }
  const Tensor ints = small_values({4, 50}).to(DType::Int64);
  expect_same(sum(ints.to(cuda()), {1}), sum(ints, {1}), "int64 sum");
  expect_same(sum(ints.to(cuda())), sum(ints), "int64 sum of all");
  const Tensor near_one = rand({3, 20}) * 0.2 + 0.9;
  const auto p = prod(near_one.to(cuda()), {1}).to(cpu_device()).to_vector<float>();
  const auto want = prod(near_one, {1}).to_vector<float>();
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-6) << "prod " << i;

  Tensor fine = randn({100}), bad = randn({10, 10}).to(DType::BFloat16);
  EXPECT_TRUE(all_finite({fine.to(cuda()), bad.to(cuda()).t()}).to(cpu_device()).item<bool>());
  std::vector<float> w = fine.to_vector<float>();
  w[57] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite({bad.to(cuda()), from_vector<float>(w, {100}).to(cuda())}).to(cpu_device()).item<bool>());
}

TEST(CudaLayoutOps, IndexingOpsAndTheirGradients) {
  NEEDS_A_GPU();
  manual_seed(5);
  const Tensor x = small_values({4, 7, 3});
  const Tensor idx = randint(-7, 7, {4, 5, 3});
  expect_same(gather(x.to(cuda()), 1, idx.to(cuda())), gather(x, 1, idx), "gather");
  const Tensor across = randint(0, 3, {2, 7, 4});
  expect_same(gather(x.to(cuda()).transpose(0, 2), 0, across.to(cuda())), gather(x.transpose(0, 2), 0, across),
              "gather of a view");
  const Tensor rows = randint(-7, 7, {9}), columns = randint(0, 3, {5});
  expect_same(index_select(x.to(cuda()), 1, rows.to(cuda())), index_select(x, 1, rows), "index_select");
  expect_same(index_select(x.to(DType::Int8).to(cuda()), 2, columns.to(cuda())),
              index_select(x.to(DType::Int8), 2, columns), "index_select of int8");
  // Small integers as floats add up exactly in any order.
  const Tensor updates = small_values({4, 5, 3}) * 2.0;
  const Tensor target = randint(0, 7, {4, 5, 3});
  expect_same(scatter_add(x.to(cuda()), 1, target.to(cuda()), updates.to(cuda())), scatter_add(x, 1, target, updates),
              "scatter_add with repeated indices");
  expect_same(scatter_add(x.to(DType::Int64).to(cuda()), 1, target.to(cuda()), updates.to(DType::Int64).to(cuda())),
              scatter_add(x.to(DType::Int64), 1, target, updates.to(DType::Int64)), "scatter_add of int64");
  for (const std::string reduce : {"prod", "amax", "amin"}) {
    // Powers of two: their products are exact in any order.
    const Tensor src = where(gt(randn({4, 5, 3}), zeros({})), full({}, 2.0), full({}, 0.5));
    expect_same(scatter_reduce(x.to(cuda()), 1, target.to(cuda()), src.to(cuda()), reduce),
                scatter_reduce(x, 1, target, src, reduce), "scatter_reduce " + reduce);
  }
  const Tensor classes = randint(0, 6, {11});
  expect_same(one_hot(classes.to(cuda()), 6), one_hot(classes, 6), "one_hot");
  // gather's gradient is a scatter_add.
  Tensor xc = x.clone().set_requires_grad(true), xg = x.to(cuda()).set_requires_grad(true);
  sum(gather(xc, 1, idx) * 3.0).backward();
  sum(gather(xg, 1, idx.to(cuda())) * 3.0).backward();
  expect_same(xg.grad(), xc.grad(), "gather's gradient");
}

// int32 indices (MindSpore's default) stay on the GPU: the dispatcher
// widens them there for the kernels that take int64, in strict mode too.
TEST(CudaLayoutOps, Int32IndicesRunOnTheGpu) {
  NEEDS_A_GPU();
  manual_seed(6);
  const Tensor x = small_values({4, 7, 3}), table = small_values({10, 4});
  const Tensor idx = randint(-7, 7, {4, 5, 3}).to(DType::Int32), rows = randint(0, 7, {9}).to(DType::Int32);
  const Tensor ids = randint(0, 10, {2, 6}).to(DType::Int32), targets = randint(0, 3, {5}).to(DType::Int32);
  const Tensor logits = small_values({5, 3});
  set_strict_device(true);
  const int64_t before = fallback_count();
  expect_same(gather(x.to(cuda()), 1, idx.to(cuda())), gather(x, 1, idx), "gather");
  expect_same(index_select(x.to(cuda()), 1, rows.to(cuda())), index_select(x, 1, rows), "index_select");
  expect_same(embedding(table.to(cuda()), ids.to(cuda())), embedding(table, ids), "embedding");
  const Tensor loss = cross_entropy(logits.to(cuda()), targets.to(cuda()));
  EXPECT_NEAR(loss.to(cpu_device()).item<float>(), cross_entropy(logits, targets).item<float>(), 1e-5f);
  set_strict_device(false);
  EXPECT_EQ(fallback_count(), before);
}

// The elementwise ops on integers and mod on every type, exactly as the
// CPU; an integer division by zero is raised when the host waits.
TEST(CudaLayoutOps, IntegerArithmeticAndModMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(10);
  const Tensor a = round(randn({6, 7}) * 20.0), b = round(randn({7}) * 5.0);
  const Tensor nonzero = where(eq(b, zeros({})), ones({}), b);
  for (DType dtype : {DType::Int32, DType::Int64, DType::Int8}) {
    const Tensor x = a.to(dtype), y = nonzero.to(dtype), gx = x.to(cuda()), gy = y.to(cuda());
    const std::string d = dtype_name(dtype);
    expect_same(gx + gy, x + y, "add " + d);
    expect_same(gx - gy, x - y, "sub " + d);
    expect_same(gx * gy, x * y, "mul " + d);
    expect_same(div(gx, gy), div(x, y), "div " + d);
    expect_same(maximum(gx, gy), maximum(x, y), "maximum " + d);
    expect_same(minimum(gx.t().contiguous().t(), gy), minimum(x, y), "minimum of a view " + d);
    expect_same(remainder(gx, gy), remainder(x, y), "remainder " + d);
    expect_same(fmod(gx, gy), fmod(x, y), "fmod " + d);
    expect_same(neg(gx), neg(x), "neg " + d);
    expect_same(abs(gx), abs(x), "abs " + d);
    expect_same(sign(gx), sign(x), "sign " + d);
    expect_same(relu(gx), relu(x), "relu " + d);
    expect_same(clamp(gx, -3.0, 4.0), clamp(x, -3.0, 4.0), "clamp " + d);
  }
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = (randn({40}) * 7.0).to(dtype), y = (randn({40}) * 2.0).to(dtype);
    expect_same(remainder(x.to(cuda()), y.to(cuda())), remainder(x, y), std::string("remainder ") + dtype_name(dtype));
    expect_same(fmod(x.to(cuda()), y.to(cuda())), fmod(x, y), std::string("fmod ") + dtype_name(dtype));
  }
  std::string message;
  try {
    div(from_vector<int64_t>({4, 9}, {2}).to(cuda()), from_vector<int64_t>({2, 0}, {2}).to(cuda())).to(cpu_device());
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("integer division by zero"), std::string::npos) << message;
}

// topk along any axis, largest and smallest, ties in the order of their
// positions as on the CPU.
TEST(CudaLayoutOps, TopkMatchesTheCpuWithTies) {
  NEEDS_A_GPU();
  manual_seed(9);
  const Tensor x = small_values({5, 40, 3});  // many ties
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64, DType::Int8}) {
    const Tensor t = x.to(dtype);
    for (int64_t axis : {1, 2, 0}) {
      for (bool largest : {true, false}) {
        const int64_t k = std::min<int64_t>(3, t.shape()[static_cast<size_t>(axis)]);
        const auto [gv, gi] = topk(t.to(cuda()), k, axis, largest);
        const auto [cv, ci] = topk(t, k, axis, largest);
        const std::string what = std::string("topk ") + dtype_name(dtype) + " axis " + std::to_string(axis);
        expect_same(gv, cv, what + " values");
        expect_same(gi, ci, what + " indices");
      }
    }
  }
}

// An index out of range cannot throw inside a kernel: it is raised where the
// host next waits for the GPU, with what the CPU would have said, and the
// device goes on working.
TEST(CudaLayoutOps, AnIndexOutOfRangeIsRaisedWhenTheHostWaits) {
  NEEDS_A_GPU();
  const Tensor table = randn({10, 4}).to(cuda());
  const Tensor bad = from_vector<int64_t>({1, 12, 3}, {3}).to(cuda());
  std::string message;
  try {
    embedding(table, bad).to(cpu_device());
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("embedding index 12 at position 1 is out of range for a table of 10 rows"), std::string::npos)
      << message;
  const Tensor logits = randn({3, 5}).to(cuda());
  message.clear();
  try {
    cross_entropy(logits, from_vector<int64_t>({0, 7, 1}, {3}).to(cuda())).item<double>();
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("target 7 at position 1 is not a class index in [0, 5)"), std::string::npos) << message;
  message.clear();
  try {
    gather(table, 0, from_vector<int64_t>({0, -11}, {2, 1}).to(cuda())).to(cpu_device());
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("gather index -11 at position 1 is out of range for an axis of size 10"), std::string::npos)
      << message;
  const Tensor fine = embedding(table, from_vector<int64_t>({9, -1}, {2}).to(cuda())).to(cpu_device());
  EXPECT_EQ(fine.shape(), (Shape{2, 4}));
}

// interpolate in its modes and coordinate mappings, with its gradient.
TEST(CudaLayoutOps, InterpolateAndItsGradientMatchTheCpu) {
  NEEDS_A_GPU();
  manual_seed(8);
  const Tensor x = randn({2, 3, 7, 9}, DType::Float64);
  const std::vector<Attrs> modes = {
      {{"size", std::vector<int64_t>{14, 18}}, {"mode", std::string("nearest")}},
      {{"size", std::vector<int64_t>{5, 20}}, {"mode", std::string("linear")}},
      {{"size", std::vector<int64_t>{13, 4}},
       {"mode", std::string("linear")},
       {"coordinates", std::string("align_corners")}},
      {{"size", std::vector<int64_t>{11, 11}}, {"mode", std::string("cubic")}},
      {{"size", std::vector<int64_t>{3, 4}}, {"mode", std::string("linear")}, {"antialias", true}}};
  for (const Attrs& attrs : modes) {
    const std::string what = "interpolate " + attrs.str();
    Tensor xc = x.clone().set_requires_grad(true), xg = x.to(cuda()).set_requires_grad(true);
    const Tensor yc = call("interpolate", {xc}, attrs)[0], yg = call("interpolate", {xg}, attrs)[0];
    const auto g = yg.to(cpu_device()).to_vector<double>(), want = yc.to_vector<double>();
    ASSERT_EQ(g.size(), want.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], want[i], 1e-12) << what << " element " << i;
    const Tensor up = randn(yc.shape(), DType::Float64);
    sum(yc * up).backward();
    sum(yg * up.to(cuda())).backward();
    const auto gg = xg.grad().to(cpu_device()).to_vector<double>(), gw = xc.grad().to_vector<double>();
    for (size_t i = 0; i < gg.size(); ++i) ASSERT_NEAR(gg[i], gw[i], 1e-12) << what << " gradient " << i;
  }
}

// One model trained eagerly with Adam on `device`: the loss of every step.
std::vector<double> train_steps(const std::string& model, const models::ModelConfig& config, Device device,
                                std::optional<DType> autocast, int steps) {
  manual_seed(6);
  auto net = models::make_model(model, config);
  net->to(device);
  optim::Adam opt(net->trainable_params(), optim::AdamOptions{.lr = 1e-3});
  const bool text = models::reads_tokens(model);
  std::vector<double> losses;
  manual_seed(7);
  for (int step = 0; step < steps; ++step) {
    const Tensor x = text ? randint(0, config.vocab_size, {4, config.seq_len}) : randn({8, 1, 28, 28});
    const Tensor y = text ? randint(0, config.vocab_size, {4 * config.seq_len}) : randint(0, 10, {8});
    Tensor loss;
    {
      AutocastScope scope(autocast);
      Tensor out = (*net)(x.to(device));
      if (text) out = out.reshape({-1, config.vocab_size});
      loss = cross_entropy(out, y.to(device));
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

void expect_trains_like_the_cpu(const std::string& model, const models::ModelConfig& config,
                                std::optional<DType> autocast, double tol) {
  const auto cpu = train_steps(model, config, cpu_device(), autocast, 6);
  const int64_t before = fallback_count();
  const auto gpu = train_steps(model, config, cuda(), autocast, 6);
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], tol * std::fabs(cpu[i])) << model << " step " << i;
  EXPECT_EQ(fallback_count(), before) << "ops of " << model << "'s step ran on the CPU: see the warnings above";
}

// W4: embedding, causal attention, layer norm, GELU, the vocabulary's loss.
TEST(CudaLayoutOps, TheCharacterTransformerTrainsOnTheGpuWithTheCpusLosses) {
  NEEDS_A_GPU();
  models::ModelConfig config;
  config.seq_len = 32;
  config.d_model = 64;
  config.dim_feedforward = 128;
  expect_trains_like_the_cpu("char_transformer", config, std::nullopt, 1e-3);
}

// bfloat16 autocast: convolutions and GEMMs in bfloat16 on both sides (their
// sums run in other orders, so the tolerance is bfloat16's).
TEST(CudaLayoutOps, TheCnnTrainsInBfloat16AutocastLikeTheCpu) {
  NEEDS_A_GPU();
  if (OpRegistry::instance().get("conv2d").dtypes(DeviceType::CUDA).empty())
    GTEST_SKIP() << "this build of the CUDA backend has no cuDNN";
  expect_trains_like_the_cpu("cnn", {}, DType::BFloat16, 3e-2);
}

}  // namespace
}  // namespace kiln

// Functions of the API that are compositions of registered ops rather than
// ops of their own: conv1d, stack, chunk, square, 1-D matmul; and the scan
// for inf and NaN.
#include <gtest/gtest.h>

#include <limits>

#include "kiln/kiln.h"

using namespace kiln;

TEST(Composite, Conv1dIsConv2dOverAUnitHeight) {
  manual_seed(11);
  auto x = randn({2, 4, 9}, DType::Float64), w = randn({6, 2, 3}, DType::Float64), b = randn({6}, DType::Float64);
  auto y = conv1d(x, w, b, /*stride=*/2, /*padding=*/1, /*dilation=*/2, /*groups=*/2);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 4}));
  // Direct evaluation of the definition.
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>(), yv = y.to_vector<double>();
  for (int n = 0; n < 2; ++n)
    for (int o = 0; o < 6; ++o)
      for (int t = 0; t < 4; ++t) {
        double acc = bv[o];
        int g = o / 3;
        for (int c = 0; c < 2; ++c)
          for (int k = 0; k < 3; ++k) {
            int pos = t * 2 - 1 + k * 2;
            if (pos >= 0 && pos < 9) acc += xv[(n * 4 + g * 2 + c) * 9 + pos] * wv[(o * 2 + c) * 3 + k];
          }
        EXPECT_NEAR(yv[(n * 6 + o) * 4 + t], acc, 1e-12);
      }
  EXPECT_THROW(conv1d(randn({2, 4}), w), Error);
}

TEST(Composite, StackAndChunk) {
  auto a = from_vector<float>({1, 2}), b = from_vector<float>({3, 4});
  EXPECT_EQ(stack({a, b}).shape(), (Shape{2, 2}));
  EXPECT_EQ(stack({a, b}, 1).to_vector<float>(), (std::vector<float>{1, 3, 2, 4}));
  auto parts = chunk(arange(0.0, 7.0, 1.0), 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].to_vector<float>(), (std::vector<float>{0, 1, 2}));
  EXPECT_EQ(parts[2].to_vector<float>(), (std::vector<float>{6}));
  // Gradients flow through the pieces.
  auto x = arange(0.0, 4.0, 1.0).set_requires_grad();
  auto halves = chunk(x, 2);
  sum(halves[1] * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 3, 3}));
}

TEST(Composite, MatmulWithVectors) {
  auto m = arange(0.0, 6.0, 1.0).reshape({2, 3});
  auto v = from_vector<float>({1, 1, 1});
  EXPECT_EQ(matmul(m, v).to_vector<float>(), (std::vector<float>{3, 12}));
  EXPECT_EQ(matmul(from_vector<float>({1, 1}), m).to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(matmul(v, v).dim(), 0);
  EXPECT_EQ(matmul(v, v).item<float>(), 3.0f);
  EXPECT_EQ(square(v * 2.0).to_vector<float>(), std::vector<float>(3, 4.0f));
}

TEST(Activations, ReluPassesNaNThroughAsPyTorchDoes) {
  auto v = relu(from_vector<float>({std::nanf(""), -1.0f, 2.0f})).to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));  // a NaN must reach the loss, where training notices it
  EXPECT_EQ(v[1], 0.0f);
  EXPECT_EQ(v[2], 2.0f);
}

TEST(Losses, CrossEntropyWithClassesLastMatchesTheTransposedForm) {
  Tensor logits = randn({2, 5, 7}).set_requires_grad();  // [N, T, V]
  Tensor target = randint(0, 7, {2, 5});
  CrossEntropyOptions last;
  last.classes_last = true;
  Tensor a = cross_entropy(logits, target, last);
  Tensor b = cross_entropy(logits.permute({0, 2, 1}), target);  // PyTorch's [N, C, T]
  EXPECT_NEAR(a.item<float>(), b.item<float>(), 1e-5);
  a.backward();
  EXPECT_EQ(logits.grad().shape(), logits.shape());
  last.reduction = "none";
  EXPECT_EQ(cross_entropy(logits, target, last).shape(), (Shape{2, 5}));
  EXPECT_THROW(cross_entropy(logits, randint(0, 7, {2, 7}), last), Error);
}

namespace {
using namespace kiln;

// Per-channel reductions of NCHW (the conv bias gradient, batch statistics)
// take a path that sums in place; it must agree with the permuted general path.
TEST(Reductions, KeepingAMiddleAxisMatchesThePermutedSum) {
  Generator gen(3);
  Tensor x = randn({5, 7, 6, 9}, DType::Float32, &gen);
  Tensor want = sum(x.permute({1, 0, 2, 3}).contiguous().reshape({7, 5 * 6 * 9}), {1});
  auto a = sum(x, {0, 2, 3}).to_vector<float>(), b = want.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << i;
  auto m = mean(x, {0, 2, 3}, true);
  EXPECT_EQ(m.shape(), (Shape{1, 7, 1, 1}));
  EXPECT_NEAR(m.to_vector<float>()[3], b[3] / 270.0f, 1e-5);
  Tensor big = full({2, 3, 4}, 4e15, DType::Int64);  // sums past 2^53 stay exact
  EXPECT_EQ(sum(big, {0, 2}).to_vector<int64_t>(), std::vector<int64_t>(3, 32000000000000000LL));
}

}  // namespace

// The batched matmul paths: a weight shared by every batch entry runs as one
// GEMM over the stacked rows; many small products run one per thread. Both
// must equal the products taken one at a time, in float32 and float64.
TEST(Composite, BatchedMatmulPathsMatchOneProductAtATime) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor a = randn({3, 5, 4}, dt), w = randn({4, 6}, dt);
    Tensor shared = matmul(a, w);
    Tensor heads = randn({2, 8, 16, 12}, dt), keys = randn({2, 8, 12, 16}, dt);
    Tensor small = matmul(heads, keys);
    Tensor transposed = matmul(a, randn({6, 4}, dt).t());  // shared and transposed
    for (int64_t i = 0; i < 3; ++i) {
      Tensor want = matmul(a.slice(0, i, i + 1).squeeze(0).contiguous(), w);
      auto g = shared.slice(0, i, i + 1).squeeze(0).to(DType::Float64).contiguous().to_vector<double>();
      auto e = want.to(DType::Float64).to_vector<double>();
      for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], e[j], 1e-4);
    }
    EXPECT_EQ(transposed.shape(), (Shape{3, 5, 6}));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 8; h += 3) {
        Tensor x = heads.slice(0, b, b + 1).slice(1, h, h + 1).reshape({16, 12});
        Tensor y = keys.slice(0, b, b + 1).slice(1, h, h + 1).reshape({12, 16});
        auto g = small.slice(0, b, b + 1).slice(1, h, h + 1).reshape({16, 16}).to(DType::Float64).contiguous().to_vector<double>();
        auto e = matmul(x, y).to(DType::Float64).to_vector<double>();
        for (size_t j = 0; j < g.size(); ++j) EXPECT_NEAR(g[j], e[j], 1e-4);
      }
  }
}

TEST(Mod, SignsFollowTheDivisorOrTheDividendAndZeroDivisorsAreErrors) {
  Tensor a = from_vector<int64_t>({-7, 7, -7, 7, 6}, {5});
  Tensor b = from_vector<int64_t>({3, -3, -3, 3, 3}, {5});
  EXPECT_EQ(remainder(a, b).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, -1, 1, 0}));  // Python's %
  EXPECT_EQ(fmod(a, b).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1, -1, 1, 0}));       // C's fmod
  Tensor fa = a.to(DType::Float32) + 0.5, fb = b.to(DType::Float32);
  EXPECT_EQ(remainder(fa, fb).to_vector<float>(), (std::vector<float>{2.5f, -1.5f, -0.5f, 1.5f, 0.5f}));
  try {
    remainder(a, from_vector<int64_t>({1, 0, 1, 1, 1}, {5}));
    FAIL() << "an integer zero divisor must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos) << e.what();
  }
}

// A fully masked attention row: its maximum is -inf, which masks test for.
TEST(Reductions, MaxOfMinusInfinitiesIsMinusInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = from_vector<float>({-inf, -inf, -inf, 1.0f, inf, inf}, {2, 3});
  EXPECT_EQ(amax(x, {1}).to_vector<float>(), (std::vector<float>{-inf, inf}));
  EXPECT_EQ(amin(x, {1}).to_vector<float>(), (std::vector<float>{-inf, 1.0f}));
}

// A whole long tensor's extremes (split across the threads, eight lanes at
// a time), equal to a plain loop's; the extreme in any lane or in the tail,
// infinities, and a NaN anywhere, which wins.
TEST(Reductions, WholeTensorExtremesMatchAPlainLoop) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t n : {32768, 100003}) {
    manual_seed(static_cast<uint64_t>(n));
    std::vector<float> v = randn({n}).to_vector<float>();
    for (int64_t at : {int64_t{0}, int64_t{5}, n / 2 + 3, n - 1}) {
      std::vector<float> w = v;
      w[static_cast<size_t>(at)] = 40.0f;
      w[static_cast<size_t>((at + 7) % n)] = -40.0f;
      const Tensor x = from_vector<float>(w, {n});
      EXPECT_EQ(amax(x).item<float>(), 40.0f) << n << " " << at;
      EXPECT_EQ(amin(x).item<float>(), -40.0f) << n << " " << at;
      w[static_cast<size_t>((at + 1) % n)] = inf;
      EXPECT_EQ(amax(from_vector<float>(w, {n})).item<float>(), inf);
      w[static_cast<size_t>((at + 2) % n)] = std::nanf("");
      EXPECT_TRUE(std::isnan(amax(from_vector<float>(w, {n})).item<float>())) << n << " " << at;
      EXPECT_TRUE(std::isnan(amin(from_vector<float>(w, {n})).item<float>())) << n << " " << at;
    }
    EXPECT_EQ(amax(full({n}, -inf)).item<float>(), -inf);
  }
}

// cumprod's gradient is exact where the input holds zeros (dividing the
// products by the input would give NaN there): against central differences.
TEST(Cumprod, GradientIsExactAcrossZeros) {
  const std::vector<double> values = {2, 0, 3, 0.5, 0, 0, 1, -2, 1.5, -1, 0, 4};
  for (bool reverse : {false, true}) {
    Tensor x = from_vector(values, Shape{3, 4});
    Tensor w = randn({3, 4}, DType::Float64);
    x.set_requires_grad(true);
    auto loss = [&](const Tensor& t) {
      return sum(call1(OpRegistry::instance().get("cumprod"), {t}, {{"axis", int64_t{1}}, {"reverse", reverse}}) * w);
    };
    loss(x).backward();
    const std::vector<double> grad = x.grad().to_vector<double>();
    for (size_t i = 0; i < values.size(); ++i) {
      std::vector<double> up = values, down = values;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      NoGradGuard no_grad;
      const double numeric = (loss(from_vector(up, Shape{3, 4})).item<double>() - loss(from_vector(down, Shape{3, 4})).item<double>()) / 2e-6;
      EXPECT_NEAR(grad[i], numeric, 1e-6) << "element " << i << (reverse ? " (reverse)" : "");
    }
  }
}


// gather_nd and scatter_nd (ONNX GatherND and ScatterND) pick and write whole
// rows by index tuples, with gradients through the ops they are made of.
TEST(IndexTuples, GatherAndScatterRowsWithGradients) {
  Tensor x = arange(0, 24, 1, DType::Float64).reshape({2, 3, 4});
  x.set_requires_grad(true);
  Tensor idx = from_vector(std::vector<int64_t>{1, 2, 0, -1}, Shape{2, 2});
  Tensor rows = gather_nd(x, idx);
  ASSERT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.to_vector<double>(), (std::vector<double>{20, 21, 22, 23, 8, 9, 10, 11}));  // x[1, 2], x[0, -1]
  sum(rows * 2.0).backward();
  std::vector<double> g = x.grad().to_vector<double>();
  EXPECT_EQ(g[20], 2);
  EXPECT_EQ(g[8], 2);
  EXPECT_EQ(g[0], 0);

  // One index per batch entry: x[0, 1] and x[1, 2].
  Tensor per_batch = gather_nd(x.detach(), from_vector(std::vector<int64_t>{1, 2}, Shape{2, 1, 1}), 1);
  ASSERT_EQ(per_batch.shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(per_batch.to_vector<double>(), (std::vector<double>{4, 5, 6, 7, 20, 21, 22, 23}));

  Tensor base = ones({4, 3}, DType::Float64), updates = from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  base.set_requires_grad(true);
  updates.set_requires_grad(true);
  Tensor at = from_vector(std::vector<int64_t>{1, 3}, Shape{2, 1});
  Tensor written = scatter_nd(base, at, updates);
  EXPECT_EQ(written.to_vector<double>(), (std::vector<double>{1, 1, 1, 1, 2, 3, 1, 1, 1, 4, 5, 6}));
  sum(written).backward();
  EXPECT_EQ(base.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(updates.grad().to_vector<double>(), std::vector<double>(6, 1.0));
  Tensor twice = from_vector(std::vector<int64_t>{2, 2}, Shape{2, 1});
  EXPECT_EQ(scatter_nd(base.detach(), twice, updates.detach(), "add").to_vector<double>(),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 6, 8, 10, 1, 1, 1}));
  std::string msg;
  try {
    scatter_nd(base.detach(), at, ones({3, 3}, DType::Float64));
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("updates must have shape [2, 3]"), std::string::npos) << msg;
  // Combining: the maximum of the row and every update naming it.
  EXPECT_EQ(scatter_nd(base.detach(), twice, updates.detach(), "max").to_vector<double>(),
            (std::vector<double>{1, 1, 1, 1, 1, 1, 4, 5, 6, 1, 1, 1}));
  EXPECT_NE(std::string([&] {
              try {
                scatter_nd(base.detach(), at, updates.detach(), "median");
              } catch (const std::exception& e) {
                return std::string(e.what());
              }
              return std::string();
            }()).find("not one of none, add, mul, max, min"),
            std::string::npos);
}

// einsum against the products it names, written out.
TEST(Einsum, MatchesTheProductsItNames) {
  manual_seed(5);
  Tensor a = randn({2, 3, 4}, DType::Float64), b = randn({2, 4, 5}, DType::Float64), m = randn({3, 3}, DType::Float64);
  auto close = [](const Tensor& x, const Tensor& y) {
    ASSERT_EQ(x.shape(), y.shape());
    const auto u = x.contiguous().to_vector<double>(), v = y.contiguous().to_vector<double>();
    for (size_t i = 0; i < u.size(); ++i) EXPECT_NEAR(u[i], v[i], 1e-12) << i;
  };
  close(einsum("bij,bjk->bik", {a, b}), matmul(a, b));
  close(einsum("bij,bjk", {a, b}), sum(matmul(a, b), {0}, false));  // implicit output: i, k (b repeats)
  close(einsum("ij->ji", {m}), m.transpose(0, 1));
  close(einsum("ii->i", {m}), from_vector(std::vector<double>{m.to_vector<double>()[0], m.to_vector<double>()[4],
                                                               m.to_vector<double>()[8]}, Shape{3}));
  close(einsum("ii", {m}), sum(einsum("ii->i", {m})));  // the trace
  close(einsum("bij->", {a}), sum(a));
  close(einsum("...ij,...jk->...ik", {a, b}), matmul(a, b));
  close(einsum("ij,kj->ik", {a.select(0, 0), a.select(0, 1)}), matmul(a.select(0, 0), a.select(0, 1).transpose(0, 1)));
  Tensor u = randn({3}, DType::Float64), v = randn({4}, DType::Float64);
  close(einsum("i,j->ij", {u, v}), mul(u.reshape({3, 1}), v.reshape({1, 4})));
  // Size-1 batch axes broadcast.
  close(einsum("bij,bjk->bik", {a.slice(0, 0, 1), b}), matmul(a.slice(0, 0, 1).expand({2, 3, 4}).contiguous(), b));

  // Gradients through the composition: d/dA sum(einsum("bij,bjk->bik")) = sum_k B.
  Tensor x = a.detach(), y = b.detach();
  x.set_requires_grad(true);
  sum(einsum("bij,bjk->bik", {x, y})).backward();
  close(x.grad(), sum(y, {2}, false).reshape({2, 1, 4}).expand({2, 3, 4}));

  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([&] { einsum("ij,jk->ik", {m}); }).find("2 input terms but 1 operands"), std::string::npos);
  EXPECT_NE(message([&] { einsum("ijk->i", {m}); }).find("names 3 axes but its operand has 2"), std::string::npos);
  EXPECT_NE(message([&] { einsum("ij,jk->ik", {a.select(0, 0), m}); }).find("sizes 4 and 3"), std::string::npos);
}

// conv3d and max_pool3d against their definitions written as loops, and
// conv3d's gradient against central differences.
TEST(Volumes, Conv3dAndMaxPool3dFollowTheirDefinitions) {
  manual_seed(9);
  Tensor x = randn({1, 2, 4, 4, 3}, DType::Float64), w = randn({2, 2, 2, 3, 2}, DType::Float64), b = randn({2}, DType::Float64);
  Conv3dOptions o;
  o.stride = {2, 1, 1};
  o.padding = {1, 1, 0};
  Tensor y = conv3d(x, w, b, o);
  ASSERT_EQ(y.shape(), (Shape{1, 2, 3, 4, 2}));
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>(), yv = y.to_vector<double>();
  auto xi = [&](int64_t c, int64_t d, int64_t h, int64_t v) { return ((c * 4 + d) * 4 + h) * 3 + v; };
  for (int64_t oc = 0; oc < 2; ++oc)
    for (int64_t od = 0; od < 3; ++od)
      for (int64_t oh = 0; oh < 4; ++oh)
        for (int64_t ow = 0; ow < 2; ++ow) {
          double want = bv[oc];
          for (int64_t c = 0; c < 2; ++c)
            for (int64_t kd = 0; kd < 2; ++kd)
              for (int64_t kh = 0; kh < 3; ++kh)
                for (int64_t kw = 0; kw < 2; ++kw) {
                  const int64_t d = od * 2 - 1 + kd, h = oh - 1 + kh, v = ow + kw;
                  if (d < 0 || d >= 4 || h < 0 || h >= 4) continue;
                  want += xv[xi(c, d, h, v)] * wv[(((oc * 2 + c) * 2 + kd) * 3 + kh) * 2 + kw];
                }
          EXPECT_NEAR(yv[((oc * 3 + od) * 4 + oh) * 2 + ow], want, 1e-12);
        }

  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  Tensor weights = randn({1, 2, 3, 4, 2}, DType::Float64);
  auto loss = [&](const Tensor& t) { return sum(conv3d(t, w, b, o) * weights); };
  loss(leaf).backward();
  const auto grad = leaf.grad().to_vector<double>();
  for (size_t i = 0; i < xv.size(); i += 7) {
    std::vector<double> up = xv, down = xv;
    up[i] += 1e-6;
    down[i] -= 1e-6;
    NoGradGuard no_grad;
    const double numeric = (loss(from_vector(up, x.shape())).item<double>() - loss(from_vector(down, x.shape())).item<double>()) / 2e-6;
    EXPECT_NEAR(grad[i], numeric, 1e-6) << i;
  }

  Tensor p = max_pool3d(x, {2, 2, 2}, {2, 2, 1}, {0, 1, 0});
  ASSERT_EQ(p.shape(), (Shape{1, 2, 2, 3, 2}));
  const auto pv = p.to_vector<double>();
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t od = 0; od < 2; ++od)
      for (int64_t oh = 0; oh < 3; ++oh)
        for (int64_t ow = 0; ow < 2; ++ow) {
          double want = -1e300;
          for (int64_t kd = 0; kd < 2; ++kd)
            for (int64_t kh = 0; kh < 2; ++kh)
              for (int64_t kw = 0; kw < 2; ++kw) {
                const int64_t d = od * 2 + kd, h = oh * 2 - 1 + kh, v = ow + kw;
                if (h >= 0 && h < 4) want = std::max(want, xv[xi(c, d, h, v)]);
              }
          EXPECT_EQ(pv[((c * 2 + od) * 3 + oh) * 2 + ow], want);
        }
}

// A product's gradient is the product of the other factors, also where some
// are zero (one zero: only it has a gradient; two: nothing has); a maximum's
// is shared among the values that reach it.
TEST(ScatterReduce, GradientsCountZerosAndTies) {
  Tensor x = from_vector(std::vector<double>{2, 0, 3, 0}, Shape{4}).set_requires_grad();
  Tensor src = from_vector(std::vector<double>{5, 0, 4, 7, 1, 0}, Shape{6}).set_requires_grad();
  Tensor index = from_vector(std::vector<int64_t>{0, 0, 1, 2, 2, 3}, Shape{6});
  Tensor y = scatter_reduce(x, 0, index, src, "prod");
  EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{0, 0, 21, 0}));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 4, 7, 0}));
  EXPECT_EQ(src.grad().to_vector<double>(), (std::vector<double>{0, 10, 0, 3, 21, 0}));

  Tensor a = from_vector(std::vector<double>{1, 5}, Shape{2}).set_requires_grad();
  Tensor b = from_vector(std::vector<double>{3, 3, 2}, Shape{3}).set_requires_grad();
  Tensor top = scatter_reduce(a, 0, from_vector(std::vector<int64_t>{0, 0, 1}, Shape{3}), b, "amax");
  EXPECT_EQ(top.to_vector<double>(), (std::vector<double>{3, 5}));
  sum(top).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 0.5, 0}));
}

// conv_transpose3d against its definition: every input element spreads its
// weights onto the output from position i * stride (per axis, taps dilation
// apart), then padding is cut from both ends and output_padding added.
TEST(Volumes, ConvTranspose3dFollowsItsDefinition) {
  manual_seed(31);
  const Tensor x = randn({1, 2, 3, 3, 2}, DType::Float64), w = randn({2, 3, 2, 2, 2}, DType::Float64);
  const Tensor b = randn({3}, DType::Float64);
  Conv3dOptions o;
  o.stride = {2, 1, 2};
  o.padding = {1, 0, 1};
  o.dilation = {1, 2, 1};
  o.output_padding = {1, 0, 1};
  const Tensor y = conv_transpose3d(x, w, b, o);
  // Full sizes (i - 1) * s + (k - 1) * d + 1, minus 2 * padding, plus output_padding.
  const int64_t fd = 2 * 2 + 1 + 1, fh = 2 * 1 + 2 + 1, fw = 1 * 2 + 1 + 1;
  ASSERT_EQ(y.shape(), (Shape{1, 3, fd - 2 + 1, fh, fw - 2 + 1}));
  std::vector<double> full(static_cast<size_t>(3 * (fd + 1) * fh * (fw + 1)), 0.0);
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t l = 0; l < 2; ++l)
          for (int64_t oc = 0; oc < 3; ++oc)
            for (int64_t a = 0; a < 2; ++a)
              for (int64_t bb = 0; bb < 2; ++bb)
                for (int64_t d = 0; d < 2; ++d) {
                  const int64_t z = i * 2 + a, h = j + bb * 2, v = l * 2 + d;
                  full[((oc * (fd + 1) + z) * fh + h) * (fw + 1) + v] +=
                      xv[((c * 3 + i) * 3 + j) * 2 + l] * wv[((c * 3 + oc) * 2 + a) * 4 + bb * 2 + d];
                }
  const auto yv = y.to_vector<double>();
  const Shape& ys = y.shape();
  for (int64_t oc = 0; oc < 3; ++oc)
    for (int64_t z = 0; z < ys[2]; ++z)
      for (int64_t h = 0; h < ys[3]; ++h)
        for (int64_t v = 0; v < ys[4]; ++v) {
          const double want = full[((oc * (fd + 1) + z + 1) * fh + h) * (fw + 1) + v + 1] + bv[oc];
          EXPECT_NEAR(yv[((oc * ys[2] + z) * ys[3] + h) * ys[4] + v], want, 1e-9) << oc << " " << z << " " << h << " " << v;
        }
}

// The first inf or NaN, in any dtype, at the start or end of a block of the
// scan or alone in a long tensor; the largest finite values, subnormals and
// -0 are finite.
TEST(Scans, FirstNonFiniteFindsTheFirstInfOrNaN) {
  const int64_t n = 3 * 4096 + 17;
  for (DType dtype : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    std::vector<double> v(static_cast<size_t>(n), 1.5);
    v[3] = dtype == DType::Float64 ? std::numeric_limits<double>::max() : 65504.0;
    v[4] = -0.0;
    v[5] = std::numeric_limits<float>::denorm_min();
    EXPECT_EQ(first_non_finite(from_vector(v, {n}).to(dtype)), -1) << dtype_name(dtype);
    for (int64_t at : {int64_t{0}, int64_t{4095}, int64_t{4096}, int64_t{2 * 4096 + 5}, n - 1})
      for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
        std::vector<double> w = v;
        w[static_cast<size_t>(at)] = bad;
        if (at + 9 < n) w[static_cast<size_t>(at + 9)] = bad;  // a later one does not count
        EXPECT_EQ(first_non_finite(from_vector(w, {n}).to(dtype)), at) << dtype_name(dtype) << " " << bad;
      }
  }
  EXPECT_EQ(first_non_finite(ones({4}, DType::Int64)), -1);
}

// where() against a plain loop over the broadcast operands, for the runs its
// kernel takes apart: a condition per row over whole rows (copied) and over
// a broadcast value (filled), an element-wise condition, operands broadcast
// along the inner axis, and transposed operands (strided runs).
TEST(Where, EveryBroadcastPatternMatchesAPlainLoop) {
  manual_seed(21);
  const Tensor rows_cond = gt(randn({1, 3, 5, 1}), zeros({}));
  const Tensor full_cond = gt(randn({2, 3, 5, 8}), zeros({}));
  const Tensor a = randn({2, 3, 5, 8}), b = randn({2, 3, 5, 8}), row_b = randn({2, 3, 1, 8}), scalar = randn({});
  auto check = [](const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& got) {
    const Shape s = got.shape();
    const Tensor c = cond.expand(s).contiguous(), xs = x.expand(s).contiguous(), ys = y.expand(s).contiguous();
    const auto cv = c.to(DType::Float32).to_vector<float>(), xv = xs.to_vector<float>(), yv = ys.to_vector<float>(),
               gv = got.contiguous().to_vector<float>();
    for (size_t i = 0; i < gv.size(); ++i) ASSERT_EQ(gv[i], cv[i] != 0 ? xv[i] : yv[i]) << "at " << i;
  };
  check(rows_cond, a, b, where(rows_cond, a, b));
  check(rows_cond, a, row_b, where(rows_cond, a, row_b));
  check(rows_cond, scalar, b, where(rows_cond, scalar, b));
  check(full_cond, a, b, where(full_cond, a, b));
  check(full_cond, a, row_b, where(full_cond, a, row_b));
  check(rows_cond.transpose(1, 2), a.transpose(1, 2), b.transpose(1, 2),
        where(rows_cond.transpose(1, 2), a.transpose(1, 2), b.transpose(1, 2)));
}

// gather reads its index through its strides (an expanded row of
// positions, as a key/value cache update makes), int64 or int32, negative
// positions from the end; a position out of range is refused by value.
TEST(Gather, ExpandedInt32AndNegativeIndicesMatchAPlainLoop) {
  manual_seed(5);
  const Tensor x = randn({2, 3, 6, 4});
  const Tensor rows = from_vector<int64_t>({5, 0, -1, 2, 3, -6}, {1, 1, 6, 1});
  for (const Tensor& index : {rows.expand({2, 3, 6, 4}), rows.to(DType::Int32).expand({2, 3, 6, 4}),
                              rows.expand({2, 3, 6, 4}).contiguous()}) {
    const auto got = gather(x, 2, index).to_vector<float>();
    const auto want = x.contiguous().to_vector<float>();
    const std::vector<int64_t> at = {5, 0, 5, 2, 3, 0};
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t r = 0; r < 6; ++r)
          for (int64_t c = 0; c < 4; ++c)
            ASSERT_EQ(got[((b * 3 + h) * 6 + r) * 4 + c], want[((b * 3 + h) * 6 + at[r]) * 4 + c]) << b << h << r << c;
  }
  // scatter_add walks its index the same way: int32 and an expanded index give int64's sums.
  const Tensor spread = rows.expand({2, 3, 6, 4});
  EXPECT_EQ(scatter_add(zeros({2, 3, 6, 4}), 2, spread.to(DType::Int32), x).to_vector<float>(),
            scatter_add(zeros({2, 3, 6, 4}), 2, spread.contiguous(), x).to_vector<float>());
  // Along the last axis, and one position past the end.
  const Tensor last = from_vector<int64_t>({3, 0, 1}, {1, 1, 1, 3}).expand({2, 3, 6, 3});
  EXPECT_EQ(gather(x, 3, last).select(3, 0).contiguous().to_vector<float>(),
            x.select(3, 3).contiguous().to_vector<float>());
  try {
    gather(x, 2, from_vector<int64_t>({6}, {1, 1, 1, 1}).expand({2, 3, 1, 4}));
    FAIL() << "position 6 of 6 was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 6 is out of range for size 6"), std::string::npos) << e.what();
  }
}

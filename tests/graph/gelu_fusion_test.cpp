// GELU as exports write it, x * 0.5 * (1 + erf(x / √2)) or its tanh form in
// elementary ops: an inference graph makes it one gelu and runs it in the
// epilogue of the linear layer before it, with the eager ops' answers (NaN
// and infinities included).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backends/cpu/gemm_tile.h"
#include "kiln/kiln.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

using kiln::testing::count;

// Equal within float rounding, NaN where the other has NaN.
void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  auto a = got.to(DType::Float64).to_vector<double>(), b = want.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      ASSERT_TRUE(std::isnan(a[i])) << what << " at " << i << ": " << a[i];
      continue;
    }
    if (std::isinf(b[i])) {
      ASSERT_EQ(a[i], b[i]) << what << " at " << i;
      continue;
    }
    ASSERT_NEAR(a[i], b[i], 1e-4 + 1e-4 * std::abs(b[i])) << what << " at " << i;
  }
}

TEST(GeluFusion, WrittenOutGelusRunInTheLinearLayersBeforeThem) {
  manual_seed(41);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor w = randn({40, 24}) * 0.5;
  // Columns 0 and 1 of every output are -inf and +inf; the rest spread from
  // about -15 to 15 (erf's tails, where 1 + erf rounds to 0 or 2).
  Tensor b = randn({40}) * 4.0;
  b.data<float>()[0] = static_cast<float>(-inf);
  b.data<float>()[1] = static_cast<float>(inf);
  const double r2 = std::sqrt(2.0);
  auto program = [&](const std::vector<Tensor>& in) {
    const Tensor h1 = linear(in[0], w, b), h2 = linear(in[1], w, b), h3 = linear(in[1] * 2.0, w, b);
    const Tensor h4 = linear(in[1] * 3.0, w, b);
    const Tensor a = h1 * (1.0 + erf(h1 / r2)) * 0.5;          // (x * (1 + erf)) * 0.5
    const Tensor c = (erf(h2 * (1.0 / r2)) + 1.0) * 0.5 * h2;  // ((erf + 1) * 0.5) * x
    const Tensor d = h3 * 0.5 * (1.0 + erf(h3 / r2));          // (x * 0.5) * (1 + erf)
    const Tensor sum = 1.0 + erf(h4 / r2);                     // read twice: stays as it is
    // The tanh form, as F.gelu(approximate="tanh") exports it and as GPT-2's
    // code writes it (pow).
    const double k = std::sqrt(2.0 / M_PI);
    const Tensor h5 = linear(in[0] * 0.5, w, b), h6 = linear(in[1] * 4.0, w, b);
    const Tensor e = 0.5 * (h5 * (1.0 + tanh(k * (h5 + 0.044715 * (h5 * (h5 * h5))))));
    const Tensor f = (0.5 * h6) * (tanh((h6 + pow(h6, 3.0) * 0.044715) * k) + 1.0);
    return std::vector<Tensor>{a, c, d, h4 * sum * 0.5, sum, e, f};
  };
  // 600 rows (a library GEMM's size) and 30 (weights packed into panels),
  // the last rows NaN.
  Tensor many = randn({600, 24}), few = randn({30, 24});
  many.data<float>()[599 * 24] = std::numeric_limits<float>::quiet_NaN();
  few.data<float>()[29 * 24 + 5] = std::numeric_limits<float>::quiet_NaN();
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;
  auto fn = jit::compile(program, {many, few}, o);
  const std::vector<Tensor> got = fn({many, few});
  const std::string report = fn.report().str(), graph = fn.graph_text();
  EXPECT_NE(report.find("5 GELUs written out in erf or tanh, add and mul ops into gelu"), std::string::npos) << report;
  EXPECT_EQ(count(graph, "linear + gelu"), 5u) << graph;
  EXPECT_EQ(count(graph, "fused_gelu_tanh=true"), 2u) << graph;
  // 30 rows on packed weights (where the tile's epilogue has GELU), 600 on oneDNN's post-op.
  if (cpu::gemm::swish_in_epilogue) {
    EXPECT_EQ(count(graph, "linear + gelu (packed)"), 3u) << graph;
  }
  EXPECT_EQ(count(graph, "erf"), 1u) << graph;
  EXPECT_EQ(count(graph, "tanh("), 0u) << graph;
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({many, few});
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
}

// Look-alikes stay as they are: another constant (x / 2), and the sum's
// factor other than x.
TEST(GeluFusion, LookAlikesAreLeftAlone) {
  manual_seed(42);
  auto program = [&](const std::vector<Tensor>& in) {
    const Tensor x = in[0], y = in[0] * 3.0;
    return std::vector<Tensor>{x * (1.0 + erf(x / 2.0)) * 0.5, y * (1.0 + erf(x / std::sqrt(2.0))) * 0.5};
  };
  Tensor x = randn({5, 7});
  jit::CompileOptions o;
  o.inference = true;
  auto fn = jit::compile(program, {x}, o);
  const std::vector<Tensor> got = fn({x});
  EXPECT_EQ(fn.report().str().find("GELUs"), std::string::npos) << fn.report().str();
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({x});
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i], "output " + std::to_string(i));
}

}  // namespace

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <sstream>

#include "kiln/kiln.h"
#include "support/scratch.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

void expect_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], atol + rtol * std::abs(y[i])) << "at " << i;
}

TEST(Compile, CellMatchesEagerAndRunsAgainWithNewData) {
  manual_seed(1);
  auto net = models::make_model("mlp");
  net->set_train(false);
  Tensor x = randn({8, 1, 28, 28});
  auto fn = jit::compile(net, {x});
  for (int i = 0; i < 3; ++i) {
    Tensor xi = randn({8, 1, 28, 28});
    Tensor want;
    {
      NoGradGuard g;
      want = net->construct(xi);
    }
    expect_close(fn({xi})[0], want);
  }
  EXPECT_EQ(fn.compiles(), 1);
  EXPECT_NE(fn.graph_text().find("linear"), std::string::npos) << fn.graph_text();
}

}  // namespace

namespace {
using namespace kiln;

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A Cell that branches on a value it computed: it cannot be traced.
struct Branchy : nn::Cell {
  std::shared_ptr<nn::Dense> fc = register_cell("fc", std::make_shared<nn::Dense>(4, 4));
  Tensor construct(const Tensor& x) override {
    Tensor h = fc->construct(x);
    return sum(h).item<double>() > 0 ? relu(h) : h;
  }
  std::string type_name() const override { return "Branchy"; }
};

TEST(Compile, ReadingATracedValueNamesTheCellTheOpAndTheWayOut) {
  auto net = std::make_shared<Branchy>();
  std::string e = error_of([&] { jit::compile(net, {randn({2, 4})}); });
  // The user's Cell that branches, not the built-in Dense that ran last.
  EXPECT_NE(e.find("while tracing Cell 'Branchy', after op 'sum'"), std::string::npos) << e;
  EXPECT_NE(e.find("item() on float32[], the result of 'sum'"), std::string::npos) << e;
  EXPECT_NE(e.find("kiln::where"), std::string::npos) << e;
}

// A Cell that prints an intermediate value, one level below the traced root,
// and whose C++ class gives its name.
struct Printing : nn::Cell {
  std::shared_ptr<nn::Dense> fc = register_cell("fc", std::make_shared<nn::Dense>(4, 4));
  Tensor construct(const Tensor& x) override {
    Tensor h = (*fc)(x);
    std::ostringstream os;
    os << h;
    return h;
  }
};
struct Outer : nn::Cell {
  std::shared_ptr<Printing> inner = register_cell("inner", std::make_shared<Printing>());
  Tensor construct(const Tensor& x) override { return relu((*inner)(x)); }
};

TEST(Compile, PrintingATracedValueNamesTheInnermostUserCell) {
  auto net = std::make_shared<Outer>();
  std::string e = error_of([&] { jit::compile(net, {randn({2, 4})}); });
  EXPECT_NE(e.find("while tracing Cell 'inner' (Printing), after op 'linear': printing it (operator<< or str()) on "
                   "float32[2, 4], the result of 'linear'"),
            std::string::npos)
      << e;
}

TEST(Compile, WhereCoversDataDependentChoices) {
  auto fn = jit::compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{where(gt(in[0], zeros({})), in[0], neg(in[0]))}; },
                         {randn({5})});
  Tensor x = from_vector<float>({-1, 2, -3, 4, 0});
  EXPECT_EQ(fn({x})[0].to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 0}));
}

TEST(Compile, WritingACapturedTensorIsRefused) {
  Tensor counter = zeros({1});
  std::string e = error_of([&] {
    jit::compile([&](const std::vector<Tensor>& in) {
      NoGradGuard g;
      counter.copy_(counter + sum(in[0]).reshape({1}));
      return std::vector<Tensor>{in[0] * 2};
    }, {randn({3})});
  });
  EXPECT_NE(e.find("writes into a tensor captured from outside the compiled function (float32[1])"), std::string::npos) << e;
  EXPECT_NE(e.find("register_buffer"), std::string::npos) << e;
}

TEST(Compile, NewShapesRecompileAndThePolicyCanForbidIt) {
  auto net = models::make_model("mlp");
  net->set_train(false);
  auto fn = jit::compile(net, {randn({8, 1, 28, 28})});
  EXPECT_EQ(fn({randn({4, 1, 28, 28})})[0].shape(), (Shape{4, 10}));
  EXPECT_EQ(fn({randn({8, 1, 28, 28})})[0].shape(), (Shape{8, 10}));
  EXPECT_EQ(fn.compiles(), 2);  // the 8-batch graph came from the cache
  jit::CompileOptions strict;
  strict.recompile = jit::RecompilePolicy::Error;
  auto fixed = jit::compile(net, {randn({8, 1, 28, 28})}, strict);
  std::string e = error_of([&] { fixed({randn({3, 1, 28, 28})}); });
  EXPECT_NE(e.find("compiled again, for float32[3, 1, 28, 28]"), std::string::npos) << e;
  EXPECT_NE(e.find("drop_remainder"), std::string::npos) << e;
  // A length that changes is not a last batch: the message names the axis and the ways out.
  auto per_length = jit::compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * 2}; },
                                 {randn({2, 20})}, strict);
  e = error_of([&] { per_length({randn({2, 21})}); });
  EXPECT_NE(e.find("input 0's axis 1 went from 20 to 21"), std::string::npos) << e;
  EXPECT_NE(e.find("Pad or bucket the lengths"), std::string::npos) << e;
  EXPECT_EQ(e.find("drop_remainder"), std::string::npos) << e;
}

TEST(Compile, PassesSimplifyAndTheArenaReusesMemory) {
  auto fn = jit::compile([](const std::vector<Tensor>& in) {
    Tensor a = relu(in[0]) * scalar_tensor(1.0);   // x * 1
    Tensor b = relu(in[0]);                        // the same as inside a
    Tensor unused = exp(in[0]);                    // dead
    Tensor k = scalar_tensor(2.0) * scalar_tensor(3.0);  // folded
    return std::vector<Tensor>{(a + b) * k};
  }, {randn({1000})});
  const auto& r = fn.report();
  auto summary_of = [&](const std::string& pass) {
    for (auto& p : r.passes)
      if (p.pass == pass) return p.summary;
    return std::string("missing");
  };
  EXPECT_EQ(summary_of("dead code"), "removed 1 unused ops");
  EXPECT_EQ(summary_of("common subexpressions"), "merged 1 repeated ops");
  EXPECT_NE(summary_of("constant folding").find("computed 1 ops"), std::string::npos);
  EXPECT_NE(summary_of("algebraic simplification").find("simplified 1 ops"), std::string::npos);
  Tensor x = randn({1000});
  auto want = ((relu(x) + relu(x)) * 6.0).to_vector<float>();
  auto got = fn({x})[0].to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5);
  EXPECT_LT(r.arena_bytes, r.unshared_bytes);
}

// Exports write a constant per use (each layer its own position offset):
// the ops reading equal constants are one op, also those that only folding
// made the same, or made in float64 and converted; constants that differ in
// a value stay apart.
TEST(Compile, OpsOnEqualConstantsAreMerged) {
  auto program = [](const std::vector<Tensor>& in) {
    std::vector<Tensor> out;
    for (int layer = 0; layer < 3; ++layer) {
      const Tensor offset = from_vector<float>({1.0f, 2.0f}, {2});        // a fresh tensor each time
      const Tensor folded = from_vector<float>({0.5f, 1.0f}, {2}) * 2.0;  // equal once folded
      out.push_back(exp(in[0] + offset) * exp(in[0] + folded));
    }
    out.push_back(exp(in[0] + from_vector<float>({1.0f, 3.0f}, {2})));
    out.push_back(exp(in[0] + from_vector<double>({1.0, 2.0}, {2}).to(DType::Float32) * 1.0));
    return out;
  };
  const Tensor x = randn({4, 2});
  auto fn = jit::compile(program, {x});
  const std::string graph = fn.graph_text();
  // One exp(x + [1, 2]) for the three layers and the last output, one for [1, 3].
  EXPECT_EQ(kiln::testing::count(graph, "exp"), 2u) << graph;
  const std::vector<Tensor> got = fn({x}), want = program({x});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i]);
}

// Taking a run of consecutive indices along an axis (how PyTorch exports
// `qkv[0]`: a Gather by one index) is a slice, a view with no copy; other
// indices stay an index_select.
TEST(Compile, RunsOfConstantIndicesAreSlices) {
  const Tensor first = from_vector<int64_t>({1}, {1}), run = from_vector<int64_t>({1, 2}, {2}),
               apart = from_vector<int64_t>({0, 2}, {2});
  auto program = [&](const std::vector<Tensor>& in) {
    const Tensor x = in[0].permute({1, 0, 2});  // [3, 4, 5]
    return std::vector<Tensor>{index_select(x, 0, first) * 2.0, index_select(x, 0, run) + 1.0,
                               index_select(x, 2, apart) - 1.0};
  };
  Tensor x = randn({4, 3, 5});
  auto fn = jit::compile(program, {x});
  const std::string graph = fn.graph_text();
  EXPECT_EQ(kiln::testing::count(graph, "= slice("), 2u) << graph;
  EXPECT_EQ(kiln::testing::count(graph, "= index_select("), 1u) << graph;
  const std::vector<Tensor> got = fn({x}), want = program({x});
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i]);
}

TEST(Compile, InferenceFoldsBatchNormAndSeesLaterWeightChanges) {
  manual_seed(2);
  auto net = models::make_model("resnet8");
  net->set_train(false);
  jit::CompileOptions o;
  o.inference = true;
  Tensor x = randn({2, 1, 28, 28});
  auto fn = jit::compile(net, {x}, o);
  EXPECT_EQ(fn.graph_text().find("batch_norm"), std::string::npos) << fn.graph_text();
  NoGradGuard g;
  expect_close(fn({x})[0], net->construct(x), 1e-4, 1e-5);
  net->parameters_and_names()[0].second.mul_(0.5);  // the graph folded the old weights: it must rebuild
  expect_close(fn({x})[0], net->construct(x), 1e-4, 1e-5);
}

TEST(Compile, DumpsEveryPassAsTextAndGraphviz) {
  std::string dir = kiln::testing::scratch_dir("dump").string();
  jit::CompileOptions o;
  o.dump_dir = dir;
  o.name = "tiny";
  jit::compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(in[0]) + exp(in[0]) * 0.0}; }, {randn({4})}, o);
  EXPECT_TRUE(std::filesystem::exists(dir + "/tiny.0.00-traced.txt"));
  bool dot = false;
  for (auto& f : std::filesystem::directory_iterator(dir)) dot = dot || f.path().extension() == ".dot";
  EXPECT_TRUE(dot);
}

}  // namespace

namespace {
using namespace kiln;

TEST(Compile, ElementwiseChainsBecomeOneLoop) {
  auto fn = jit::compile([](const std::vector<Tensor>& in) {
    Tensor h = relu(in[0] * scalar_tensor(2.0) + in[1]) - exp(in[1]);
    return std::vector<Tensor>{sqrt(abs(h)) / (h * h + scalar_tensor(1.0))};
  }, {randn({3, 1000}), randn({3, 1000})});
  EXPECT_NE(fn.report().str().find("elementwise fusion"), std::string::npos);
  // h is read twice, so it is written once; everything else stays in registers.
  EXPECT_NE(fn.graph_text().find("fused(exp, mul, add, relu, sub)"), std::string::npos) << fn.graph_text();
  EXPECT_EQ(fn.report().kernels, 2u) << fn.graph_text();
  Tensor x = randn({3, 1000}), y = randn({3, 1000});
  Tensor h = relu(x * 2.0 + y) - exp(y);
  Tensor want = sqrt(abs(h)) / (h * h + 1.0);
  auto a = fn({x, y})[0].to_vector<float>(), b = want.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << i;
}

// A rotary embedding's halves are slices of the heads (strided views), and a
// transpose reads across rows: the chains over them are still one loop each,
// reading the views in place.
TEST(Compile, ChainsOverViewsBecomeOneLoop) {
  auto rotate = [](const Tensor& x, const Tensor& cos, const Tensor& sin) {
    Tensor x1 = x.slice(2, 0, 8), x2 = x.slice(2, 8, 16);
    return std::vector<Tensor>{x1 * cos - x2 * sin, x2 * cos + x1 * sin,
                               relu(x.transpose(0, 1) * scalar_tensor(3.0) + scalar_tensor(1.0))};
  };
  auto fn = jit::compile([&](const std::vector<Tensor>& in) { return rotate(in[0], in[1], in[2]); },
                         {randn({5, 4, 16}), randn({4, 8}), randn({4, 8})});
  const std::string text = fn.graph_text();
  EXPECT_NE(text.find("fused(mul, mul, sub)"), std::string::npos) << text;
  EXPECT_NE(text.find("fused(mul, mul, add)"), std::string::npos) << text;
  EXPECT_NE(text.find("fused(mul, add, relu)"), std::string::npos) << text;
  Tensor x = randn({5, 4, 16}), cos = randn({4, 8}), sin = randn({4, 8});
  const auto got = fn({x, cos, sin});
  const auto want = rotate(x, cos, sin);
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape());
    auto a = got[k].to_vector<float>(), b = want[k].contiguous().to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::abs(b[i]))) << k << " " << i;
  }
}

}  // namespace

namespace {
using namespace kiln;

TEST(Compile, InferenceMergesProjectionsOfOneInputIntoOneGemm) {
  manual_seed(4);
  Tensor wq = randn({8, 16}), wk = randn({8, 16}), wv = randn({4, 16});
  Tensor bq = randn({8}), bk = randn({8}), bv = randn({4});
  auto attention_like = [&](const std::vector<Tensor>& in) {
    Tensor q = linear(in[0], wq, bq), k = linear(in[0], wk, bk), v = linear(in[0], wv, bv);
    return std::vector<Tensor>{matmul(softmax(matmul(q, k.transpose(-1, -2)), -1), v)};
  };
  jit::CompileOptions o;
  o.inference = true;
  Tensor x = randn({2, 5, 16});
  auto fn = jit::compile(attention_like, {x}, o);
  EXPECT_NE(fn.report().str().find("merged 3 linear ops that share an input into 1"), std::string::npos)
      << fn.report().str();
  expect_close(fn({x})[0], attention_like({x})[0], 1e-5, 1e-5);
}

// Linear layers take their bias, a residual add and a ReLU in one call: a
// residual block (ReLU after the add) and a transformer-style sublayer (no
// ReLU, the residual read again later, so it cannot be overwritten).
TEST(Compile, ResidualAddsAndReluFoldIntoLinearLayers) {
  manual_seed(6);
  Tensor w1 = randn({16, 16}) * 0.3, b1 = randn({16}), w2 = randn({16, 16}) * 0.3, w3 = randn({16, 16}) * 0.3;
  auto blocks = [&](const std::vector<Tensor>& in) {
    Tensor h = relu(linear(in[0], w1, b1) + in[0]);
    Tensor u = linear(h, w2) + h;
    Tensor v = relu(linear(u, w3));
    return std::vector<Tensor>{v * h + u};
  };
  Tensor x = randn({3, 7, 16});
  auto fn = jit::compile(blocks, {x});
  const std::string report = fn.report().str();
  EXPECT_NE(report.find("fused 2 residual adds into linear layers (1 with the ReLU after them)"), std::string::npos)
      << report;
  EXPECT_NE(report.find("1 linear + relu pairs"), std::string::npos) << report;
  Tensor x2 = randn({3, 7, 16});
  expect_close(fn({x2})[0], blocks({x2})[0], 1e-5, 1e-5);
}

// A sequence-first transformer at batch 1 (as nn.TransformerEncoderLayer is
// exported): the attention output's projection is [L, D], viewed [L, 1, D]
// and permuted to [1, L, D] before the residual add. Those views keep the
// elements' order, so the add still folds into the linear layer; a permute
// that reorders them (batch 2) keeps the add separate.
TEST(Compile, ResidualAddsFoldThroughViewsThatKeepTheOrder) {
  manual_seed(7);
  Tensor w = randn({16, 16}) * 0.3, b = randn({16});
  auto sublayer = [&](const std::vector<Tensor>& in) {  // in[0]: [N, L, D]
    const int64_t n = in[0].size(0), l = in[0].size(1);
    Tensor seq_first = in[0].permute({1, 0, 2}).contiguous().view({l * n, 16});
    Tensor y = linear(seq_first, w, b).view({l, n, 16}).permute({1, 0, 2});
    return std::vector<Tensor>{y + in[0]};
  };
  for (int64_t n : {1, 2})
    for (bool inference : {false, true}) {  // inference graphs run it on packed weights
      Tensor x = randn({n, 7, 16});
      jit::CompileOptions o;
      o.inference = inference;
      auto fn = jit::compile(sublayer, {x}, o);
      const bool folded = fn.report().str().find("residual adds into linear layers") != std::string::npos;
      EXPECT_EQ(folded, n == 1) << fn.report().str();
      expect_close(fn({x})[0], sublayer({x})[0], 1e-5, 1e-5);
    }
}

// ONNX-style matmul(x, W) + b with constants becomes a linear op, so the
// ReLU after it joins the same oneDNN call. The transposed weight is made
// once and shared by the graphs of every input shape.
TEST(Compile, InferenceTurnsMatmulPlusBiasIntoLinearAndSharesItsWeight) {
  manual_seed(9);
  Tensor w = randn({256, 512}) * 0.1, b = randn({512});
  auto dense = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(matmul(in[0], w) + b)}; };
  jit::CompileOptions o;
  o.inference = true;
  o.recompile = jit::RecompilePolicy::Silent;
  Tensor x = randn({2, 256});
  auto fn = jit::compile(dense, {x}, o);
  const std::string report = fn.report().str();
  EXPECT_NE(report.find("turned 1 matmul + bias pairs with constant weights into linear ops"), std::string::npos)
      << report;
  EXPECT_NE(report.find("1 linear + relu pairs"), std::string::npos) << report;
  EXPECT_NE(report.find("gave 1 linear layers weights packed into panels"), std::string::npos) << report;
  expect_close(fn({x})[0], dense({x})[0], 1e-5, 1e-5);
  expect_close(fn({x})[0], dense({x})[0], 1e-5, 1e-5);  // the first run was the traced one; this is the graph
  const int64_t before = cpu_allocator_stats().bytes_in_use;
  Tensor x3 = randn({3, 256});
  expect_close(fn({x3})[0], dense({x3})[0], 1e-5, 1e-5);  // a second graph
  EXPECT_EQ(fn.compiles(), 2);
  EXPECT_LT(cpu_allocator_stats().bytes_in_use - before, w.numel() * 4 / 2) << "the second graph copied the weight";
}

}  // namespace

#include "backends/cpu/onednn_conv.h"

namespace {
using namespace kiln;

// W3 inference: convolutions on blocked activations with the residual adds
// folded in, the same logits as eager, and about half of eager's peak memory.
TEST(Compile, ResNetInferenceKeepsBlockedLayoutsAndCutsPeakMemory) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(6);
  auto net = models::make_model("resnet8");
  net->set_train(false);
  Tensor x = randn({64, 1, 28, 28});
  NoGradGuard no_grad;
  Tensor want = net->construct(x);
  cpu_allocator_reset_peak();
  int64_t base = cpu_allocator_stats().bytes_in_use;
  net->construct(x);
  const int64_t eager = cpu_allocator_stats().peak_bytes_in_use - base;
  jit::CompileOptions o;
  o.inference = true;
  base = cpu_allocator_stats().bytes_in_use;
  auto fn = jit::compile(net, {}, o);
  fn.run_borrowed({x});  // traces
  expect_close(fn({x})[0], want, 1e-4, 1e-4);
  cpu_allocator_reset_peak();
  fn.run_borrowed({x});
  const int64_t graph = cpu_allocator_stats().peak_bytes_in_use - base;
  EXPECT_NE(fn.report().str().find("3 residual adds folded into them"), std::string::npos) << fn.report().str();
  // Eager's peak depends on the layouts oneDNN's first-call timing picked:
  // 16.1 MB with blocked ones (0.43x), 12.9 MB with plain ones (0.54x), and a
  // busy machine can tip the choice; graph mode holds 6.9 MB either way.
  EXPECT_LE(graph * 5, eager * 3) << "graph " << graph << " bytes vs eager " << eager;
}

// Max pools between blocked convolutions pool the blocked data (no reorders
// around them), with 2x2 windows and with padded, overlapping 3x3 ones; the
// linear layer after the flatten reads the blocked data with its weight's
// columns permuted, so no reorder is left at all.
TEST(Compile, PoolsAndTheClassifierReadBlockedActivations) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(8);
  Tensor w1 = randn({16, 3, 3, 3}), w2 = randn({16, 16, 3, 3}) * 0.1, w3 = randn({5, 16 * 4 * 4}) * 0.1, b3 = randn({5});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = relu(conv2d(in[0], w1, Tensor(), pad1));
    y = max_pool2d(y, {3, 3}, {2, 2}, {1, 1});
    y = relu(conv2d(y, w2, Tensor(), pad1));
    y = max_pool2d(y, {2, 2});
    return std::vector<Tensor>{linear(y.flatten(1), w3, b3)};
  };
  Tensor x = randn({2, 3, 17, 17});
  jit::CompileOptions o;
  o.inference = true;
  // oneDNN's kernels for both convolutions: timed, Winograd may win the
  // second and take its 2x2 pool into its output transform.
  ::setenv("KILN_CONV_ALGORITHM", "direct", 1);
  auto fn = jit::compile(program, {x}, o);
  Tensor got = fn({x})[0];
  ::unsetenv("KILN_CONV_ALGORITHM");
  NoGradGuard no_grad;
  Tensor want = program({x})[0];
  EXPECT_NE(fn.report().str().find("2 pools on them, 1 linear layers reading them flattened"), std::string::npos)
      << fn.report().str();
  EXPECT_EQ(fn.graph_text().find("reorder"), std::string::npos) << fn.graph_text();
  expect_close(got, want, 1e-4, 1e-4);
}

// SqueezeNet's Fire modules: two branches' blocked outputs concatenated
// along channels stay blocked (no reorder to plain and back), and the
// ceil_mode pool after them pools the blocked data, partial windows
// included. A pool whose indices nobody reads, on plain data that cannot
// be blocked (5 channels), computes values only.
TEST(Compile, BlockedBranchesConcatenateAsBlocks) {
  const int64_t block = cpu::onednn::preferred_block();
  if (block == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(9);
  Tensor squeeze = randn({block, 3, 1, 1}), expand1 = randn({2 * block, block, 1, 1}) * 0.3,
         expand3 = randn({block, block, 3, 3}) * 0.1, head = randn({5, 3 * block, 1, 1}) * 0.1;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor s = relu(conv2d(in[0], squeeze, Tensor()));
    Tensor y = concat({relu(conv2d(s, expand1, Tensor())), relu(conv2d(s, expand3, Tensor(), pad1))}, 1);
    y = max_pool2d(y, {3, 3}, {2, 2}, {0, 0}, true);
    y = conv2d(y, head, Tensor());
    return std::vector<Tensor>{max_pool2d(y, {3, 3}, {2, 2}, {1, 1}, true)};
  };
  Tensor x = randn({2, 3, 16, 16});
  jit::CompileOptions o;
  o.inference = true;
  auto fn = jit::compile(program, {x}, o);
  Tensor got = fn({x})[0];
  NoGradGuard no_grad;
  Tensor want = program({x})[0];
  EXPECT_EQ(got.shape(), (Shape{2, 5, 5, 5}));  // 16 -> 8 -> 5, each last window partial
  const std::string graph = fn.graph_text();
  EXPECT_NE(graph.find("concat[nChw"), std::string::npos) << graph;
  EXPECT_NE(graph.find("max_pool2d[nChw"), std::string::npos) << graph;
  EXPECT_NE(graph.find("max_pool2d (values)"), std::string::npos) << graph;
  EXPECT_EQ(graph.find("reorder[nChw" + std::to_string(block) + "c -> nchw]"), graph.rfind("reorder[nChw")) << graph;
  expect_close(got, want, 1e-4, 1e-4);
}

}  // namespace

namespace {
using namespace kiln;

// MobileNetV3's shapes: channels that are multiples of 8 but not of 16
// (72, 24, 40) stay blocked in 8s beside 16-blocked layers, the
// squeeze-and-excitation scale multiplies the blocked activations in place,
// and hard-swish runs inside the convolution before it.
TEST(Compile, EightChannelBlocksAndChannelScalesStayBlocked) {
  if (cpu::onednn::preferred_block() != 16) GTEST_SKIP() << "needs oneDNN's 16-channel blocks (AVX-512)";
  manual_seed(12);
  Tensor expand = randn({72, 16, 1, 1}) * 0.3, depthwise = randn({72, 1, 3, 3}) * 0.3, squeeze = randn({24, 72, 1, 1}) * 0.2,
         excite = randn({72, 24, 1, 1}) * 0.2, project = randn({40, 72, 1, 1}) * 0.2, widen = randn({96, 40, 1, 1}) * 0.2,
         bias = randn({96}) * 0.1, depthwise96 = randn({96, 1, 3, 3}) * 0.3, shift = randn({1, 96, 1, 1});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions dw;
    dw.padding = {1, 1};
    dw.groups = 72;
    Tensor y = relu(conv2d(in[0], expand, Tensor()));
    y = hardswish(conv2d(y, depthwise, Tensor(), dw));
    Tensor s = relu(conv2d(adaptive_avg_pool2d(y, {1, 1}), squeeze, Tensor()));
    y = y * hardsigmoid(conv2d(s, excite, Tensor()));
    y = conv2d(y, project, Tensor());
    y = hardswish(conv2d(y, widen, bias));
    ConvOptions dw96 = dw;
    dw96.groups = 96;
    return std::vector<Tensor>{conv2d(y, depthwise96, Tensor(), dw96) - shift};
  };
  Tensor x = randn({2, 16, 14, 14});
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;  // whether 8-blocks pay off is otherwise timed (blocked_beats_plain)
  auto fn = jit::compile(program, {x}, o);
  Tensor got = fn({x})[0];
  NoGradGuard no_grad;
  Tensor want = program({x})[0];
  const std::string graph = fn.graph_text();
  EXPECT_NE(graph.find("-> nChw8c]"), std::string::npos) << graph;
  EXPECT_NE(graph.find("mul[nChw8c, per channel]"), std::string::npos) << graph;
  EXPECT_NE(graph.find("sub[nChw16c, per channel]"), std::string::npos) << graph;  // through the op's own kernel
  EXPECT_NE(graph.find("+ hardswish"), std::string::npos) << "a post-op of the depthwise layer:\n" << graph;
  EXPECT_EQ(graph.find("groups=72"), std::string::npos) << graph;
  EXPECT_EQ(graph.find("groups=96"), std::string::npos) << graph;
  EXPECT_NE(graph.find("conv2d[nChw8c -> nChw8c]"), std::string::npos) << graph;
  EXPECT_NE(graph.find("conv2d[nChw16c -> nChw16c]"), std::string::npos) << graph;
  expect_close(got, want, 1e-4, 1e-4);
  // Timed, some layers may go back to plain layouts; the values stay.
  o.timed_choices = true;
  auto timed = jit::compile(program, {x}, o);
  expect_close(timed({x})[0], want, 1e-4, 1e-4);
}

TEST(Compile, ElementwiseFusionBroadcastsRowsAndColumns) {
  Tensor w = randn({16}), b = randn({16});
  auto norm_like = [&](const std::vector<Tensor>& in) {
    Tensor m = mean(in[0], {-1}, true);  // [4, 8, 1]
    Tensor centered = in[0] - m;
    Tensor rstd = in[1];                 // [4, 8, 1]
    return std::vector<Tensor>{exp(centered * rstd * w + b) - centered};
  };
  Tensor x = randn({4, 8, 16}), r = rand({4, 8, 1});
  auto fn = jit::compile(norm_like, {x, r});
  // centered is read twice, so it is written once; the other five ops run as one loop.
  EXPECT_NE(fn.report().str().find("fused 5 elementwise ops into 1 loops"), std::string::npos) << fn.report().str();
  Tensor x2 = randn({4, 8, 16}), r2 = rand({4, 8, 1});
  expect_close(fn({x2, r2})[0], norm_like({x2, r2})[0], 1e-5, 1e-5);
}

// An op joins fused loops through its definition's formula alone: the
// MobileNetV3 block's hardswish, hardsigmoid and gelu (with its attribute)
// fuse with arithmetic and give eager's values.
TEST(Compile, OpsWithAFormulaJoinFusedLoops) {
  auto block = [](const std::vector<Tensor>& in) {
    Tensor h = hardswish(in[0] * scalar_tensor(3.0) + in[1]);
    return std::vector<Tensor>{gelu(h * hardsigmoid(in[1]), true) - in[0]};
  };
  Tensor x = randn({2, 3, 40}), y = randn({2, 3, 40});
  auto fn = jit::compile(block, {x, y});
  EXPECT_NE(fn.graph_text().find("fused(mul, add, hardswish, hardsigmoid, mul, gelu, sub)"), std::string::npos)
      << fn.graph_text();
  EXPECT_EQ(fn.report().kernels, 1u) << fn.graph_text();
  Tensor x2 = randn({2, 3, 40}) * 2.0, y2 = randn({2, 3, 40}) * 2.0;
  expect_close(fn({x2, y2})[0], block({x2, y2})[0], 1e-5, 1e-5);
}

// A NaN pixel makes that sample's logits NaN, compiled as in eager, and leaves
// the other samples alone: fused ReLU epilogues (linear, Winograd, the
// few-channel conv + ReLU + pool) let NaN through as the eager ReLU does, so a
// poisoned batch cannot look finite to the training step's loss check.
TEST(Compile, NaNInputsPoisonTheirSampleAsInEager) {
  for (const std::string model : {"mlp", "cnn", "resnet8"}) {
    SCOPED_TRACE(model);
    manual_seed(2);
    auto net = models::make_model(model);
    net->set_train(false);
    Generator gen(3);
    Tensor x = randn({4, 1, 28, 28}, DType::Float32, &gen);
    x.data<float>()[1 * 784 + 14 * 28 + 14] = std::numeric_limits<float>::quiet_NaN();
    Tensor eager = net->construct(x);
    Tensor compiled = jit::compile(net, {x})({x})[0];
    const auto e = eager.to_vector<float>(), c = compiled.to_vector<float>();
    ASSERT_EQ(e.size(), c.size());
    const size_t classes = e.size() / 4;
    for (size_t i = 0; i < e.size(); ++i) {
      const bool poisoned_sample = i / classes == 1;
      EXPECT_EQ(std::isnan(e[i]), poisoned_sample) << "eager logit " << i;
      EXPECT_EQ(std::isnan(c[i]), poisoned_sample) << "compiled logit " << i;
      if (!poisoned_sample) {
        EXPECT_NEAR(c[i], e[i], 1e-4 + 1e-4 * std::fabs(e[i])) << i;
      }
    }
  }
}

}  // namespace

// A compiled function called with inputs of many shapes, as a server or a
// text model calls it: one graph per shape, all on one arena as large as the
// largest shape's, graphs moved when a larger shape arrives, the least
// recently used dropped first.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/kiln.h"
#include "kiln/profiler.h"

namespace {
using namespace kiln;

Tensor program(const Tensor& x, const Tensor& w) { return relu(matmul(x, w)) * 2.0 + sum(x, {1}, true); }

void expect_close(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4 * (1 + std::abs(y[i]))) << "at " << i;
}

TEST(ShapeCache, GraphsOfEveryShapeShareOneArenaAndStayRight) {
  manual_seed(3);
  const Tensor w = randn({16, 32});
  jit::CompileOptions o;
  o.recompile = jit::RecompilePolicy::Silent;
  o.max_cached_graphs = 8;
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{program(in[0], w)}; }, {}, o);
  // Small, then larger (the arena grows and the small graph moves), then small again.
  const std::vector<int64_t> rows = {3, 40, 7, 3, 40, 7, 12};
  int64_t largest_arena = 0;
  for (int64_t n : rows) {
    const Tensor x = randn({n, 16});
    expect_close(fn({x})[0], program(x, w));
    largest_arena = std::max(largest_arena, fn.report().arena_bytes);
    EXPECT_EQ(fn.report().shared_arena_bytes, largest_arena);  // the largest shape's, not the sum
  }
  EXPECT_EQ(fn.compiles(), 4);  // 3, 40, 7 and 12 rows: each shape compiled once
  EXPECT_EQ(fn.report().compile, 4);
  EXPECT_EQ(fn.report().cause, "input 0's axis 0 went from 7 to 12");  // from the shape used last
  EXPECT_NE(fn.report().str().find("(compile 4: input 0's axis 0 went from 7 to 12)"), std::string::npos)
      << fn.report().str();
}

TEST(ShapeCache, TheLeastRecentlyUsedGraphGoesFirst) {
  const Tensor w = randn({16, 32});
  jit::CompileOptions o;
  o.recompile = jit::RecompilePolicy::Silent;
  o.max_cached_graphs = 2;
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{program(in[0], w)}; }, {}, o);
  auto call = [&](int64_t n) {
    const Tensor x = randn({n, 16});
    expect_close(fn({x})[0], program(x, w));
  };
  call(2), call(4), call(2);  // 2 used last: 4 is the least recently used
  call(6);                    // drops 4
  EXPECT_EQ(fn.compiles(), 3);
  call(2);
  EXPECT_EQ(fn.compiles(), 3);  // still cached
  call(4);
  EXPECT_EQ(fn.compiles(), 4);  // was dropped
}

}  // namespace

namespace {

// Inference graphs fold the weight into a transposed constant of their own
// (shared between shapes): the cache's byte budget counts it once.
TEST(ShapeCache, DerivedConstantsCountAgainstTheByteBudget) {
  const Tensor w = randn({64, 32}), b = randn({32});
  auto compiled = [&](int64_t budget) {
    jit::CompileOptions o;
    o.recompile = jit::RecompilePolicy::Silent;
    o.inference = true;
    o.max_cached_constant_bytes = budget;
    return jit::compile([w, b](const std::vector<Tensor>& in) { return std::vector<Tensor>{matmul(in[0], w) + b}; },
                        {}, o);
  };
  for (int64_t budget : {int64_t{100}, int64_t{1} << 20}) {
    auto fn = compiled(budget);
    for (int i = 0; i < 3; ++i)
      for (int64_t n : {2, 5}) {
        const Tensor x = randn({n, 64});
        expect_close(fn({x})[0], matmul(x, w) + b);
      }
    // A 100-byte budget keeps only the graph in use; a megabyte keeps both.
    EXPECT_EQ(fn.compiles(), budget == 100 ? 6 : 2) << "budget " << budget;
  }
}

}  // namespace

namespace {

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A declared dynamic axis compiles each new size as expected, even under
// RecompilePolicy::Error, which still refuses a change anywhere else.
TEST(DynamicAxes, ANewSizeOnADeclaredAxisIsExpected) {
  manual_seed(5);
  const Tensor w = randn({16, 8});
  jit::CompileOptions o;
  o.recompile = jit::RecompilePolicy::Error;
  o.dynamic = {{0, 0}};
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{program(in[0], w)}; },
                         {randn({4, 16})}, o);
  const Tensor x = randn({7, 16});
  expect_close(fn({x})[0], program(x, w));
  EXPECT_EQ(fn.compiles(), 1);  // the first graph serves every size of the axis
  EXPECT_TRUE(fn.report().instantiated);
  EXPECT_EQ(fn.report().cause, "input 0's dynamic axis 0 went from 4 to 7");
  const std::string refused = message_of([&] { fn({randn({7, 12})}); });
  EXPECT_NE(refused.find("RecompilePolicy::Error"), std::string::npos) << refused;
}

// The first half of the rows: its slice ends at n / 2, which no line
// through the probed sizes gives, so each size compiles a graph.
Tensor first_half(const Tensor& x, const Tensor& w) { return program(x.slice(0, 0, x.shape()[0] / 2), w); }

// The profile counts the compiles it saw, each with what caused it.
TEST(DynamicAxes, TheProfileCountsCompilesAndTheirCauses) {
  manual_seed(5);
  const Tensor w = randn({16, 8});
  jit::CompileOptions o;
  o.name = "program";
  o.dynamic = {{0, 0}};
  profiler::start();
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{first_half(in[0], w)}; }, {}, o);
  fn({randn({4, 16})});
  fn({randn({7, 16})});
  fn({randn({7, 16})});
  profiler::stop();
  const std::string summary = profiler::summary();
  EXPECT_NE(summary.find("compiles: 2,"), std::string::npos) << summary;
  EXPECT_NE(summary.find("1 x graph 'program': input 0's dynamic axis 0 went from 4 to 7"), std::string::npos) << summary;
  EXPECT_NE(summary.find("1 x graph 'program': its first call, for "), std::string::npos) << summary;
  EXPECT_EQ(summary.find("program   "), std::string::npos) << "compiles are not ops: " << summary;
  EXPECT_NE(fn.report().symbolic.find("does not follow the sizes linearly"), std::string::npos) << fn.report().symbolic;
}

// A block of a Transformer over a dynamic length (views by the length, a
// projection, attention, layer norm, an elementwise chain, a mean over the
// length): compiled once, then every other length runs the same graph with
// its sizes worked out, and gives eager mode's answer.
Tensor encoder_block(const Tensor& x, const Tensor& w) {
  const int64_t n = x.shape()[1];
  Tensor h = matmul(x.reshape({n, 16}), w).reshape({1, n, 2, 8}).permute({0, 2, 1, 3});
  Tensor a = scaled_dot_product_attention(h, h, h).permute({0, 2, 1, 3}).reshape({1, n, 16});
  Tensor y = layer_norm(relu(a + x) * 0.5, {16});
  return y - mean(y, {1}, true);
}

TEST(DynamicAxes, ANewLengthReusesTheSymbolicGraph) {
  manual_seed(6);
  const Tensor w = randn({16, 16}) * 0.3;
  jit::CompileOptions o;
  o.recompile = jit::RecompilePolicy::Error;
  o.dynamic = {{0, 1}};
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{encoder_block(in[0], w)}; },
                         {}, o);
  for (int64_t n : {5, 9, 13, 6, 2}) {
    SCOPED_TRACE("length " + std::to_string(n));
    const Tensor x = randn({1, n, 16});
    expect_close(fn({x})[0], encoder_block(x, w));
    EXPECT_EQ(fn.report().instantiated, n != 5) << fn.report().str();
  }
  EXPECT_EQ(fn.compiles(), 1);
  EXPECT_NE(fn.report().symbolic.find("instantiated from compile 1 at sizes 2"), std::string::npos)
      << fn.report().str();
  // A length of 1 (a transpose over it is no copy) compiles a graph of its own.
  const Tensor one = randn({1, 1, 16});
  expect_close(fn({one})[0], encoder_block(one, w));
  EXPECT_EQ(fn.compiles(), 2);
}

// One new token's attention over a cache of a dynamic length, as an LLM
// decodes: the token's length (1) and the cache's are two symbols. At
// length 1 the heads' transpose is no copy, at 2 it is one, so the graph
// differs there: the length stays 1 and the cache's length generalizes,
// every later length instantiating the one graph; a block of two tokens
// then compiles its own.
Tensor attend_to_cache(const Tensor& x, const Tensor& cache) {
  const int64_t b = x.shape()[0], n = x.shape()[1];
  const Tensor q = x.reshape({b, n, 2, 8}).permute({0, 2, 1, 3});
  const Tensor kv = cache.reshape({b, cache.shape()[1], 2, 8}).permute({0, 2, 1, 3});
  return scaled_dot_product_attention(q, kv, kv).permute({0, 2, 1, 3}).reshape({b, n, 16}) * 2.0;
}

TEST(DynamicAxes, SymbolsOfSizeOneStayAndTheOthersGeneralize) {
  manual_seed(8);
  jit::CompileOptions o;
  o.dynamic = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  auto fn = jit::compile(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{attend_to_cache(in[0], in[1])}; }, {}, o);
  for (int64_t length : {7, 8, 12, 5}) {
    SCOPED_TRACE("cache length " + std::to_string(length));
    const Tensor x = randn({1, 1, 16}), cache = randn({1, length, 16});
    expect_close(fn({x, cache})[0], attend_to_cache(x, cache));
    if (length == 7) {
      EXPECT_NE(fn.report().symbolic.find("(those of size 1 kept)"), std::string::npos) << fn.report().str();
    }
    EXPECT_EQ(fn.report().instantiated, length != 7) << fn.report().str();
  }
  EXPECT_EQ(fn.compiles(), 1);
  const Tensor block = randn({1, 2, 16}), cache = randn({1, 9, 16});
  expect_close(fn({block, cache})[0], attend_to_cache(block, cache));
  EXPECT_EQ(fn.compiles(), 2);
  // Both graphs are kept: lengths of either kind instantiate theirs.
  const Tensor x = randn({1, 1, 16}), longer = randn({1, 20, 16});
  expect_close(fn({x, longer})[0], attend_to_cache(x, longer));
  EXPECT_TRUE(fn.report().instantiated) << fn.report().str();
  EXPECT_EQ(fn.compiles(), 2);
}

// Two symbols whose product sizes a view (batch x length rows) are not
// affine in them: the check probe shows it, and each shape compiles.
TEST(DynamicAxes, AProductOfTwoSymbolsCompilesPerShape) {
  manual_seed(7);
  const Tensor w = randn({16, 4});
  auto rows = [w](const Tensor& x) {
    const int64_t b = x.shape()[0], n = x.shape()[1];
    return matmul(x.reshape({b * n, 16}), w).reshape({b, n, 4});
  };
  jit::CompileOptions o;
  o.dynamic = {{0, 0}, {0, 1}};
  auto fn = jit::compile([rows](const std::vector<Tensor>& in) { return std::vector<Tensor>{rows(in[0])}; }, {}, o);
  for (auto [b, n] : std::vector<std::pair<int64_t, int64_t>>{{4, 6}, {3, 9}}) {
    const Tensor x = randn({b, n, 16});
    expect_close(fn({x})[0], rows(x));
  }
  EXPECT_EQ(fn.compiles(), 2);
  EXPECT_NE(fn.report().symbolic.find("does not follow the sizes linearly"), std::string::npos) << fn.report().symbolic;
}

// Positions made from the length inside the function are constants of its
// graph, other at each length: it compiles per length, and says why.
TEST(DynamicAxes, ShapesFoldedIntoConstantsCompilePerLength) {
  jit::CompileOptions o;
  o.dynamic = {{0, 1}};
  auto fn = jit::compile(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{in[0] + arange(0, static_cast<double>(in[0].shape()[1])).reshape({1, -1})};
      },
      {}, o);
  for (int64_t n : {4, 6}) {
    const Tensor x = randn({1, n});
    expect_close(fn({x})[0], x + arange(0, static_cast<double>(n)).reshape({1, -1}));
  }
  EXPECT_EQ(fn.compiles(), 2);
  EXPECT_NE(fn.report().symbolic.find("is computed from the sizes"), std::string::npos) << fn.report().symbolic;
}

// With buckets, sizes 1..8 pad up to 4 or 8: two compiles, and every output
// cut back to the call's size and equal to the eager result.
TEST(DynamicAxes, BucketsBoundTheCompilesAndOutputsAreCutBack) {
  manual_seed(6);
  const Tensor w = randn({16, 8});
  jit::CompileOptions o;
  o.recompile = jit::RecompilePolicy::Error;
  o.dynamic = {{0, 0, {4, 8}}};
  auto fn = jit::compile([w](const std::vector<Tensor>& in) { return std::vector<Tensor>{program(in[0], w)}; }, {}, o);
  for (int64_t n = 1; n <= 8; ++n) {
    const Tensor x = randn({n, 16});
    const Tensor y = fn({x})[0];
    ASSERT_EQ(y.shape(), (Shape{n, 8}));
    expect_close(y, program(x, w));
  }
  EXPECT_EQ(fn.compiles(), 2);
  const std::string past = message_of([&] { fn({randn({9, 16})}); });
  EXPECT_NE(past.find("input 0's axis 0 has size 9, past its largest bucket (8)"), std::string::npos) << past;
  o.dynamic = {{0, 0, {8, 4}}};
  const std::string unordered = message_of([&] { jit::compile([](const std::vector<Tensor>& in) { return in; }, {randn({2})}, o); });
  EXPECT_NE(unordered.find("do not ascend"), std::string::npos) << unordered;
}

// Outputs that carry the padded axis elsewhere are named: a transposed one.
TEST(DynamicAxes, OutputsNamedForAnAxisAreCutThere) {
  jit::CompileOptions o;
  o.dynamic = {{0, 1, {16}, -1.0, {{0, 1}, {1, 0}}}};
  auto fn = jit::compile([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] * 2.0, in[0].transpose(0, 1).contiguous()};
  }, {}, o);
  const Tensor x = randn({2, 11});
  const auto out = fn({x});
  ASSERT_EQ(out[0].shape(), (Shape{2, 11}));
  ASSERT_EQ(out[1].shape(), (Shape{11, 2}));
  expect_close(out[0], x * 2.0);
  expect_close(out[1], x.transpose(0, 1).contiguous());
}

}  // namespace

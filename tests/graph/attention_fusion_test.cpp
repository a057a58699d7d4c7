// Inference graphs turn attention written as separate ops (the form exported
// models have) into the attention op, and leave it alone where a part of it
// is needed on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "kiln/kiln.h"
#include "support/close.h"

namespace kt = kiln::testing;
using namespace kiln;

namespace {

jit::CompiledFunction compile_inference(jit::Function f, const std::vector<Tensor>& inputs) {
  jit::CompileOptions o;
  o.inference = true;
  return jit::compile(std::move(f), inputs, o);
}

bool fused_attention(const jit::CompiledFunction& fn) {
  return fn.report().str().find("attention patterns") != std::string::npos;
}

TEST(AttentionFusion, ExportedPatternsBecomeOneOpWithTheSameValues) {
  manual_seed(21);
  const Tensor q = randn({2, 3, 5, 4}), k = randn({2, 3, 6, 4}), v = randn({2, 3, 6, 3});
  Tensor mask = zeros({5, 6});
  mask = where(triu(ones({5, 6}, DType::Bool), 2), scalar_tensor(-std::numeric_limits<double>::infinity()), mask);
  // As torch.onnx.export writes nn.MultiheadAttention: q scaled first, then the product.
  auto scaled_query = [&](const std::vector<Tensor>& in) {
    Tensor scores = matmul(in[0] / scalar_tensor(2.0), in[1].transpose(-1, -2));
    return std::vector<Tensor>{matmul(softmax(scores, -1), in[2])};
  };
  // As BERT-style exports write it: the product scaled, then the mask added.
  auto scaled_scores = [&](const std::vector<Tensor>& in) {
    Tensor scores = matmul(in[0], in[1].transpose(-1, -2)) * scalar_tensor(0.5) + mask;
    return std::vector<Tensor>{matmul(softmax(scores, 3), in[2])};
  };
  for (const jit::Function& fn_of : std::vector<jit::Function>{scaled_query, scaled_scores}) {
    auto fn = compile_inference(fn_of, {q, k, v});
    EXPECT_NE(fn.report().str().find("fused 1 attention patterns"), std::string::npos) << fn.report().str();
    EXPECT_TRUE(kt::all_close(fn({q, k, v})[0], fn_of({q, k, v})[0], 1e-5, 1e-5));
  }
}

// What the attention op was given, read from the optimized graph's text:
// its causal flag and whether a mask came with its three operands.
struct FusedAs {
  bool causal = false, masked = false;
};
FusedAs fused_as(const jit::CompiledFunction& fn) {
  std::istringstream text(fn.graph_text());
  for (std::string line; std::getline(text, line);) {
    const size_t at = line.find(" attention(");
    if (at == std::string::npos) continue;
    const std::string operands = line.substr(at, line.find(')', at) - at);
    return {line.find("causal=true") != std::string::npos, std::count(operands.begin(), operands.end(), ',') == 3};
  }
  return {};
}

// As GPT-style decoders are exported: the scores scaled, then
// masked_fill(mask, -inf) (an ONNX Where) before the softmax.
TEST(AttentionFusion, MaskedFillBecomesTheCausalFlagOrAMask) {
  manual_seed(23);
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor q = randn({1, 4, 12, 8}), k = randn({1, 4, 12, 8}), v = randn({1, 4, 12, 16});
  auto masked = [&](Tensor blocked, double fill, bool kept_form) {
    return [blocked, fill, kept_form](const std::vector<Tensor>& in) {
      Tensor scores = matmul(in[0], in[1].transpose(-1, -2)) / scalar_tensor(std::sqrt(8.0));
      scores = kept_form ? where(eq(blocked, scalar_tensor(0, DType::Bool)), scores, scalar_tensor(fill))
                         : where(blocked, scalar_tensor(fill), scores);
      return std::vector<Tensor>{matmul(softmax(scores, -1), in[2])};
    };
  };
  const Tensor later_keys = triu(ones({12, 12}, DType::Bool), 1);
  struct Case {
    Tensor blocked;
    double fill;
    bool kept_form, causal;
  };
  const Case cases[] = {
      {later_keys, -inf, false, true},                           // torch's masked_fill(triu, -inf)
      {later_keys, -1e9, true, true},                            // torch.where(tril, scores, -1e9)
      {triu(ones({12, 12}, DType::Bool), 3), -inf, false, false},  // a band: an additive mask
      {later_keys.reshape({1, 1, 12, 12}), -3.4e38, false, true},  // broadcast over heads, finfo.min
  };
  for (const Case& c : cases) {
    const auto f = masked(c.blocked, c.fill, c.kept_form);
    auto fn = compile_inference(f, {q, k, v});
    ASSERT_TRUE(fused_attention(fn)) << fn.report().str();
    EXPECT_EQ(fused_as(fn).causal, c.causal);
    EXPECT_EQ(fused_as(fn).masked, !c.causal);
    EXPECT_TRUE(kt::all_close(fn({q, k, v})[0], f({q, k, v})[0], 1e-5, 1e-5));
  }
  // A fill the softmax still weighs, and a mask that leaves a query no key
  // (NaN from the separate ops, zeros from the attention op): left separate.
  Tensor whole_row = zeros({12, 12}, DType::Bool);
  whole_row = where(eq(arange(12).reshape({12, 1}), scalar_tensor(5, DType::Int64)), ones({12, 12}, DType::Bool), whole_row);
  for (const auto& f : {masked(later_keys, -5.0, false), masked(whole_row, -inf, false)}) {
    auto fn = compile_inference(f, {q, k, v});
    EXPECT_FALSE(fused_attention(fn)) << fn.report().str();
  }
}

TEST(AttentionFusion, ScoresNeededElsewhereStaySeparate) {
  manual_seed(22);
  const Tensor q = randn({2, 5, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  auto with_weights = [&](const std::vector<Tensor>& in) {
    Tensor weights = softmax(matmul(in[0], in[1].transpose(-1, -2)), -1);
    return std::vector<Tensor>{matmul(weights, in[2]), weights};
  };
  auto fn = compile_inference(with_weights, {q, k, v});
  EXPECT_FALSE(fused_attention(fn)) << fn.report().str();
  const auto got = fn({q, k, v}), want = with_weights({q, k, v});
  EXPECT_TRUE(kt::all_close(got[0], want[0], 1e-5, 1e-5));
  EXPECT_TRUE(kt::all_close(got[1], want[1], 1e-5, 1e-5));
  // A softmax over another axis is not attention.
  auto across_queries = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{matmul(softmax(matmul(in[0], in[1].transpose(-1, -2)), 1), in[2])};
  };
  auto other = compile_inference(across_queries, {q, k, v});
  EXPECT_FALSE(fused_attention(other)) << other.report().str();
  EXPECT_TRUE(kt::all_close(other({q, k, v})[0], across_queries({q, k, v})[0], 1e-5, 1e-5));
}

// A multi-head layer's end: the heads' outputs [N, H, L, Dv] transposed to
// [N, L, H, Dv] and made contiguous for the output projection. The attention
// kernel writes that layout itself, so the graph has no copy; the values are
// eager's, in float32 and float64, with and without the causal flag. Where
// the heads are read in their own layout too, the copy stays.
TEST(AttentionFusion, HeadsComeOutInterleavedWithoutACopy) {
  manual_seed(24);
  for (const DType dtype : {DType::Float32, DType::Float64})
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << (causal ? ", causal" : ""));
    const Tensor q = cast(randn({2, 3, 5, 4}), dtype), k = cast(randn({2, 3, 6, 4}), dtype);
    const Tensor v = cast(randn({2, 3, 6, 3}), dtype), w = cast(randn({9, 7}), dtype);
    auto layer = [&](const std::vector<Tensor>& in) {
      const Tensor heads = scaled_dot_product_attention(in[0], in[1], in[2], Tensor(), causal);
      return std::vector<Tensor>{matmul(heads.transpose(1, 2).contiguous().reshape({2, 5, 9}), w)};
    };
    auto fn = compile_inference(layer, {q, k, v});
    EXPECT_NE(fn.report().str().find("1 attention layers write their heads interleaved"), std::string::npos)
        << fn.report().str();
    EXPECT_EQ(fn.graph_text().find(" copy("), std::string::npos) << fn.graph_text();
    EXPECT_TRUE(kt::all_close(fn({q, k, v})[0], layer({q, k, v})[0], 1e-5, 1e-5));
  }
  // Compiled once for every length: the kernel takes its sizes from its tensors.
  const Tensor w = randn({16, 5});
  auto by_length = [&](const std::vector<Tensor>& in) {
    const int64_t n = in[0].size(2);
    const Tensor heads = scaled_dot_product_attention(in[0], in[0], in[0]);
    return std::vector<Tensor>{matmul(heads.transpose(1, 2).contiguous().reshape({1, n, 16}), w)};
  };
  jit::CompileOptions o;
  o.inference = true;
  o.recompile = jit::RecompilePolicy::Error;
  o.dynamic = {{0, 2}};
  auto dynamic = jit::compile(by_length, {}, o);
  for (int64_t n : {5, 9, 3}) {
    const Tensor x = randn({1, 2, n, 8});
    EXPECT_TRUE(kt::all_close(dynamic({x})[0], by_length({x})[0], 1e-5, 1e-5)) << "length " << n;
  }
  EXPECT_EQ(dynamic.compiles(), 1);
  EXPECT_NE(dynamic.report().str().find("write their heads interleaved"), std::string::npos) << dynamic.report().str();
  const Tensor q = randn({1, 2, 4, 8}), k = randn({1, 2, 4, 8}), v = randn({1, 2, 4, 8});
  auto also_returned = [&](const std::vector<Tensor>& in) {
    const Tensor heads = scaled_dot_product_attention(in[0], in[1], in[2]);
    return std::vector<Tensor>{heads.transpose(1, 2).contiguous().reshape({1, 4, 16}), heads * scalar_tensor(2.0)};
  };
  auto fn = compile_inference(also_returned, {q, k, v});
  EXPECT_EQ(fn.report().str().find("write their heads interleaved"), std::string::npos) << fn.report().str();
  const auto got = fn({q, k, v}), want = also_returned({q, k, v});
  EXPECT_TRUE(kt::all_close(got[0], want[0], 1e-5, 1e-5));
  EXPECT_TRUE(kt::all_close(got[1], want[1], 1e-5, 1e-5));
}

}  // namespace

namespace {

// Swin's shifted windows, as torchvision exports them: q and k of 4 windows
// by 2 heads, the scores plus a relative-position bias [heads, L, L], viewed
// with the windows apart from the batch [1, windows, heads, L, L], plus the
// shift's mask [1, windows, 1, L, L] (-100 where a window's parts come from
// different sides), viewed back. One attention op with one mask.
TEST(AttentionFusion, SwinsTwoConstantMasksBecomeOne) {
  manual_seed(23);
  const Tensor q = randn({4, 2, 7, 8}), k = randn({4, 2, 7, 8}), v = randn({4, 2, 7, 8});
  const Tensor bias = randn({2, 7, 7});
  const Tensor shift =
      where(gt(rand({1, 4, 1, 7, 7}), scalar_tensor(0.7)), scalar_tensor(-100.0), zeros({1, 4, 1, 7, 7}));
  auto windows = [&](const std::vector<Tensor>& in) {
    Tensor scores = matmul(in[0] * scalar_tensor(0.35), in[1].transpose(-1, -2)) + bias;
    scores = (scores.reshape({1, 4, 2, 7, 7}) + shift).reshape({4, 2, 7, 7});
    return std::vector<Tensor>{matmul(softmax(scores, -1), in[2])};
  };
  auto fn = compile_inference(windows, {q, k, v});
  EXPECT_NE(fn.report().str().find("fused 1 attention patterns"), std::string::npos) << fn.report().str();
  EXPECT_TRUE(fused_as(fn).masked) << fn.graph_text();
  EXPECT_TRUE(kt::all_close(fn({q, k, v})[0], windows({q, k, v})[0], 1e-5, 1e-5));
}

}  // namespace

// Inference graphs turn attention written as separate ops (the form exported
// models have) into the attention op, and leave it alone where a part of it
// is needed on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

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

}  // namespace

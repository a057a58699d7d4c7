// MultiheadAttention and TransformerEncoderLayer against PyTorch's, with the
// same weights (tests/golden/make_module_golden.py).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "support/golden_json.h"

using namespace kiln;

namespace {

Tensor tensor_of(const nlohmann::json& j) { return kiln::testing::golden_tensor(j); }
const nlohmann::json& cases() { return kiln::testing::golden_json_cases("module_golden.json"); }

const nlohmann::json& find(const std::string& name) {
  for (auto& c : cases())
    if (c.at("name") == name) return c;
  throw std::runtime_error("no golden case " + name);
}

// Copies every PyTorch weight into the parameter of the same name; all must match.
void load_weights(nn::Cell& cell, const nlohmann::json& weights) {
  NoGradGuard guard;
  size_t loaded = 0;
  for (auto& [name, t] : cell.parameters_and_names()) {
    ASSERT_TRUE(weights.contains(name)) << "PyTorch has no weight " << name;
    Tensor dst = t;
    dst.copy_(tensor_of(weights.at(name)));
    ++loaded;
  }
  EXPECT_EQ(loaded, weights.size()) << "some PyTorch weights have no Kiln parameter";
}

void expect_close(const Tensor& got, const nlohmann::json& expected) {
  Tensor e = tensor_of(expected);
  ASSERT_EQ(got.shape(), e.shape());
  auto g = got.to_vector<float>(), w = e.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << "element " << i;
}

Tensor bool_mask(const nlohmann::json& m) {
  std::vector<bool> v = m.at("data").get<std::vector<bool>>();
  return from_vector(v, m.at("shape").get<Shape>());
}

}  // namespace

TEST(MultiheadAttention, SelfCrossAndCausalMatchPyTorch) {
  for (const char* name : {"mha_self", "mha_cross_padding", "mha_causal"}) {
    SCOPED_TRACE(name);
    const auto& c = find(name);
    nn::MultiheadAttention mha(c["config"]["embed_dim"], c["config"]["heads"]);
    load_weights(mha, c["weights"]);
    Tensor q = tensor_of(c["inputs"][0]), k = tensor_of(c["inputs"][1]), v = tensor_of(c["inputs"][2]);
    if (std::string(name) == "mha_self") k = v = q;  // exercises the packed projection
    nn::AttentionMasks masks;
    if (c["masks"].contains("key_padding_mask")) masks.key_padding_mask = bool_mask(c["masks"]["key_padding_mask"]);
    if (c["masks"].contains("causal")) masks.causal = true;
    expect_close(mha.forward(q, k, v, masks), c["output"]);
  }
}

TEST(MultiheadAttention, BoolMaskEqualsCausalFlag) {
  manual_seed(3);
  nn::MultiheadAttention mha(8, 2);
  Tensor x = randn({1, 4, 8});
  nn::AttentionMasks causal, explicit_mask;
  causal.causal = true;
  explicit_mask.attn_mask = triu(ones({4, 4}, DType::Bool), 1);
  EXPECT_EQ(mha.forward(x, x, x, causal).to_vector<float>(), mha.forward(x, x, x, explicit_mask).to_vector<float>());
  // The first position can only see itself: changing later positions leaves it alone.
  Tensor y = x.clone();
  {
    NoGradGuard g;
    y.slice(1, 2, 4).fill_(5.0);
  }
  EXPECT_EQ(mha.forward(x, x, x, causal).slice(1, 0, 2).contiguous().to_vector<float>(),
            mha.forward(y, y, y, causal).slice(1, 0, 2).contiguous().to_vector<float>());
  EXPECT_THROW(mha.forward(randn({1, 4, 6}), x, x), Error);
}

TEST(TransformerEncoderLayer, PostAndPreNormMatchPyTorch) {
  for (const char* name : {"encoder_post_relu", "encoder_pre_gelu"}) {
    SCOPED_TRACE(name);
    const auto& c = find(name);
    const auto& cfg = c["config"];
    nn::TransformerEncoderOptions o;
    o.dim_feedforward = cfg["dim_feedforward"];
    o.dropout = 0.0;
    o.norm_first = cfg["norm_first"];
    o.gelu = cfg["gelu"];
    nn::TransformerEncoderLayer layer(cfg["d_model"], cfg["heads"], o);
    load_weights(layer, c["weights"]);
    layer.set_train(false);
    nn::AttentionMasks masks;
    masks.causal = true;
    expect_close(layer.forward(tensor_of(c["inputs"][0]), masks), c["output"]);
  }
}

TEST(TransformerEncoderLayer, TrainsThroughAttention) {
  manual_seed(9);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0});
  Tensor x = randn({4, 6, 8}), target = randn({4, 6, 8});
  optim::Adam adam(layer.trainable_params(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    Tensor loss = mse_loss(layer(x), target);
    (i == 0 ? first : last) = loss.item<double>();
    adam.zero_grad();
    loss.backward();
    adam.step();
  }
  EXPECT_LT(last, 0.7 * first);
  for (auto& p : layer.trainable_params()) EXPECT_TRUE(p.grad().defined());
}

// Heads read where they stand: Q, K and V as strided views of one packed
// projection (a sequence-first [L, 1, 3E] at batch 1 sliced, viewed and
// permuted to [H, L, D], as exported encoders have it, or a BERT-style
// [N, L, H, D] permuted to [N, H, L, D]), and K shared by every head
// (stride 0), give what their contiguous copies give.
TEST(ScaledDotProductAttention, StridedHeadsMatchContiguousCopies) {
  manual_seed(31);
  const int64_t l = 9, n = 2, heads = 3, dh = 16, e = heads * dh;
  Tensor packed = randn({l, 1, 3 * e});
  auto head_view = [&](int64_t part) {
    return packed.slice(2, part * e, (part + 1) * e).view({l, heads, dh}).permute({1, 0, 2});
  };
  Tensor bert = randn({n, l, heads, dh}).permute({0, 2, 1, 3});
  Tensor shared_key = randn({1, l, dh}).expand({heads, l, dh});
  Tensor mask = randn({l, l});
  struct Case {
    Tensor q, k, v, mask;
    bool causal;
  };
  const Case cases[] = {
      {head_view(0), head_view(1), head_view(2), Tensor(), false},
      {head_view(0), head_view(1), head_view(2), Tensor(), true},
      {head_view(0), shared_key, head_view(2), mask, false},
      {bert, bert, bert, Tensor(), true},
  };
  NoGradGuard no_grad;
  for (const Case& c : cases) {
    ASSERT_FALSE(c.q.is_contiguous());
    const Tensor got = scaled_dot_product_attention(c.q, c.k, c.v, c.mask, c.causal);
    const Tensor want =
        scaled_dot_product_attention(c.q.contiguous(), c.k.contiguous(), c.v.contiguous(), c.mask, c.causal);
    const auto g = got.to_vector<float>(), w = want.to_vector<float>();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-6 + 1e-6 * std::abs(w[i])) << "element " << i;
  }
}

// The float32 kernel on register tiles (value widths of whole 16-column
// panels) against the float64 one on a GEMM: key counts on and off a panel's
// edge, one key, queries split into several work items, causal rows, an
// additive mask with a row that sees nothing (zeros, not NaN), value widths
// other than the keys', a head size of 0 (every key weighs alike), and the
// weights kept for the gradients (causal rows whose keys end inside a panel).
TEST(ScaledDotProductAttention, TiledFloat32MatchesFloat64) {
  manual_seed(47);
  struct Case {
    int64_t batch, l, s, d, dv;
    bool causal, mask;
  };
  const Case cases[] = {
      {8, 128, 128, 32, 32, false, false}, {2, 37, 37, 16, 16, true, false}, {2, 40, 48, 32, 32, true, false},
      {3, 20, 130, 24, 48, false, true},   {1, 70, 1, 8, 16, false, false},  {4, 33, 33, 64, 64, true, true},
      {1, 300, 45, 16, 32, false, false},  {2, 3, 4, 0, 16, false, false},
  };
  NoGradGuard no_grad;
  for (const Case& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + ", " + std::to_string(c.l) + " x " + std::to_string(c.s) +
                 ", d " + std::to_string(c.d) + ", dv " + std::to_string(c.dv) + (c.causal ? ", causal" : "") +
                 (c.mask ? ", mask" : ""));
    const Tensor q = randn({c.batch, c.l, c.d}), k = randn({c.batch, c.s, c.d}), v = randn({c.batch, c.s, c.dv});
    Tensor mask;
    if (c.mask) {
      std::vector<float> m(static_cast<size_t>(c.l * c.s));
      for (size_t i = 0; i < m.size(); ++i)
        m[i] = i % 7 == 3 ? -std::numeric_limits<float>::infinity() : 0.1f * (i % 5);
      std::fill(m.begin() + c.s, m.begin() + 2 * c.s, -std::numeric_limits<float>::infinity());  // row 1 sees nothing
      mask = from_vector(m, {c.l, c.s});
    }
    const Tensor got = scaled_dot_product_attention(q, k, v, mask, c.causal);
    const Tensor want = scaled_dot_product_attention(q.to(DType::Float64), k.to(DType::Float64), v.to(DType::Float64),
                                                     mask.defined() ? mask.to(DType::Float64) : Tensor(), c.causal);
    ASSERT_EQ(got.shape(), (Shape{c.batch, c.l, c.dv}));
    const auto g = got.to_vector<float>();
    const auto w = want.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 2e-5 + 2e-5 * std::abs(w[i])) << "element " << i;
    if (c.mask) {  // the row that sees nothing, in every batch
      for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t j = 0; j < c.dv; ++j) EXPECT_EQ(g[static_cast<size_t>((b * c.l + 1) * c.dv + j)], 0.0f);
    }
    // With a gradient to take, the forward keeps the weights (written by the
    // tiles where whole panels fit a row) and the gradients read them.
    const Tensor dy = randn({c.batch, c.l, c.dv});
    auto gradients = [&](DType dtype) {
      std::vector<Tensor> leaves{q.to(dtype), k.to(dtype), v.to(dtype)};
      for (Tensor& t : leaves) t.set_requires_grad(true);
      autograd::set_grad_enabled(true);  // (the test runs without gradients otherwise)
      const Tensor m = mask.defined() ? mask.to(dtype) : Tensor();
      sum(scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], m, c.causal) * dy.to(dtype)).backward();
      autograd::set_grad_enabled(false);
      return std::vector<Tensor>{leaves[0].grad(), leaves[1].grad(), leaves[2].grad()};
    };
    const std::vector<Tensor> got_grads = gradients(DType::Float32), want_grads = gradients(DType::Float64);
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE("gradient of input " + std::to_string(i));
      const auto gg = got_grads[i].to_vector<float>();
      const auto wg = want_grads[i].to_vector<double>();
      ASSERT_EQ(gg.size(), wg.size());
      for (size_t j = 0; j < gg.size(); ++j)
        ASSERT_NEAR(gg[j], wg[j], 1e-4 + 1e-4 * std::abs(wg[j])) << "element " << j;
    }
  }
}

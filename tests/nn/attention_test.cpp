// MultiheadAttention and TransformerEncoderLayer against PyTorch's, with the
// same weights (tests/golden/make_module_golden.py).
#include <gtest/gtest.h>

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

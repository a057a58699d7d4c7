// nn::LSTM, GRU and RNN against PyTorch's with the same state dict
// (tests/golden/make_recurrent_golden.py, float64 there, float32 here): outputs, final states and the
// gradients of every weight, the input and the initial states, through
// several layers, both directions and batch-first input.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/golden_json.h"

using namespace kiln;

namespace {

Tensor tensor_of(const nlohmann::json& j) { return kiln::testing::golden_tensor(j); }
const nlohmann::json& cases() { return kiln::testing::golden_json_cases("recurrent_golden.json"); }

void expect_close(const Tensor& got, const nlohmann::json& expected, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << " is missing";
  Tensor e = tensor_of(expected);
  ASSERT_EQ(got.shape(), e.shape()) << what;
  auto g = got.to(DType::Float64).to_vector<double>(), w = e.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 2e-5 + 1e-4 * std::abs(w[i])) << what << " element " << i;
}

std::shared_ptr<nn::RecurrentLayer> build(const nlohmann::json& c) {
  nn::RecurrentOptions o;
  o.num_layers = c.at("num_layers");
  o.batch_first = c.at("batch_first");
  o.bidirectional = c.at("bidirectional");
  o.bias = c.at("bias");
  if (c.contains("nonlinearity")) o.nonlinearity = c.at("nonlinearity");
  const std::string kind = c.at("kind");
  const int64_t in = c.at("input"), hidden = c.at("hidden");
  if (kind == "LSTM") return std::make_shared<nn::LSTM>(in, hidden, o);
  if (kind == "GRU") return std::make_shared<nn::GRU>(in, hidden, o);
  return std::make_shared<nn::RNN>(in, hidden, o);
}

TEST(Recurrent, LayersMatchPyTorchForwardAndBackward) {
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    auto layer = build(c.at("config"));
    // Every PyTorch weight loads into the parameter of the same name and shape.
    const auto& weights = c.at("weights");
    auto params = layer->parameters_and_names();
    ASSERT_EQ(params.size(), weights.size());
    {
      NoGradGuard guard;
      for (auto& [name, p] : params) {
        ASSERT_TRUE(weights.contains(name)) << "PyTorch has no weight " << name;
        Tensor dst = p;
        dst.copy_(tensor_of(weights.at(name)));
      }
    }
    Tensor x = tensor_of(c.at("input"));
    x.set_requires_grad(true);
    std::vector<Tensor> states;
    for (const auto& s : c.at("states")) {
      states.push_back(tensor_of(s));
      states.back().set_requires_grad(true);
    }
    nn::RecurrentResult r = layer->forward(x, states.empty() ? Tensor() : states[0],
                                           states.size() > 1 ? states[1] : Tensor());
    std::vector<Tensor> outs;
    for (const Tensor* t : {&r.output, &r.h_n, &r.c_n})
      if (t->defined()) outs.push_back(*t);
    ASSERT_EQ(outs.size(), c.at("outputs").size());
    Tensor loss = zeros({});
    for (size_t i = 0; i < outs.size(); ++i) {
      expect_close(outs[i], c.at("outputs")[i], "output " + std::to_string(i));
      loss = loss + sum(outs[i] * tensor_of(c.at("upstream")[i]));
    }
    loss.backward();
    expect_close(x.grad(), c.at("grad_input"), "input gradient");
    for (size_t i = 0; i < states.size(); ++i) expect_close(states[i].grad(), c.at("grad_states")[i], "state gradient");
    for (auto& [name, p] : layer->parameters_and_names()) expect_close(p.grad(), c.at("grad_weights").at(name), name);
  }
}

TEST(Recurrent, UnbatchedInputAndClearErrors) {
  manual_seed(1);
  nn::LSTM lstm(3, 4);
  Tensor x = randn({5, 3});
  nn::RecurrentResult unbatched = lstm.forward(x);
  nn::RecurrentResult batched = lstm.forward(x.unsqueeze(1));
  EXPECT_EQ(unbatched.output.shape(), Shape({5, 4}));
  EXPECT_EQ(unbatched.h_n.shape(), Shape({1, 4}));
  EXPECT_EQ(unbatched.output.to_vector<float>(), batched.output.squeeze(1).to_vector<float>());

  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { lstm.forward(randn({5, 2, 7})); }).find("built for 3 input features"), std::string::npos);
  EXPECT_NE(message([&] { lstm.forward(randn({5, 2, 3}), randn({2, 2, 4})); }).find("h0 must be"), std::string::npos);
  nn::GRU gru(3, 4);
  EXPECT_NE(message([&] { gru.forward(randn({5, 2, 3}), Tensor(), randn({1, 2, 4})); }).find("no cell state"),
            std::string::npos);
  EXPECT_NE(message([&] { nn::RNN(3, 4, {.nonlinearity = "gelu"}); }).find("not one of tanh, relu"), std::string::npos);
}

// A small LSTM classifier learns a task only memory solves: the label is
// the sign of the first element of the sequence, seen nine steps earlier.
TEST(Recurrent, LstmLearnsToRememberTheFirstStep) {
  manual_seed(4);
  nn::LSTM lstm(1, 8, {.batch_first = true});
  nn::Dense head(8, 2);
  std::vector<Tensor> params = lstm.trainable_params();
  for (auto& p : head.trainable_params()) params.push_back(p);
  optim::Adam opt(params, optim::AdamOptions{.lr = 0.02});
  Tensor x = randn({64, 10, 1});
  Tensor first = x.select(1, 0).squeeze(1);
  Tensor labels = gt(first, zeros_like(first)).to(DType::Int64);
  double loss_value = 0;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor logits = head.construct(lstm.forward(x).h_n.select(0, 0));
    Tensor loss = cross_entropy(logits, labels);
    loss.backward();
    opt.step();
    loss_value = loss.item<double>();
  }
  EXPECT_LT(loss_value, 0.2) << "an LSTM should remember the first step";
}

}  // namespace

namespace {

// Embedding-free sequence classifier: a bidirectional two-layer GRU and an
// LSTM on its output, the LSTM's last hidden state into a linear head.
class SequenceClassifier : public nn::Cell {
 public:
  SequenceClassifier() {
    gru = register_cell("gru", std::make_shared<nn::GRU>(3, 6, nn::RecurrentOptions{.num_layers = 2, .batch_first = true, .bidirectional = true}));
    lstm = register_cell("lstm", std::make_shared<nn::LSTM>(12, 5, nn::RecurrentOptions{.batch_first = true}));
    head = register_cell("head", std::make_shared<nn::Dense>(5, 3));
  }
  Tensor construct(const Tensor& x) override {
    return head->construct(lstm->forward(gru->construct(x)).h_n.select(0, 0));
  }
  std::shared_ptr<nn::GRU> gru;
  std::shared_ptr<nn::LSTM> lstm;
  std::shared_ptr<nn::Dense> head;
};

}  // namespace

// The compiled training step (forward, the recurrent backward ops, SGD in one
// graph) follows the eager one step for step.
TEST(Recurrent, CompiledTrainingStepMatchesEager) {
  auto run = [](bool compiled) {
    manual_seed(7);
    auto net = std::make_shared<SequenceClassifier>();
    auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    Tensor x = randn({4, 7, 3});
    Tensor y = from_vector<int64_t>({0, 2, 1, 2}, {4});
    auto loss_fn = [](const Tensor& out, const Tensor& labels) { return cross_entropy(out, labels); };
    std::vector<float> losses;
    if (compiled) {
      jit::TrainStep step(net, loss_fn, opt);
      for (int i = 0; i < 5; ++i) losses.push_back(step(x, y).loss.item<float>());
    } else {
      for (int i = 0; i < 5; ++i) {
        opt->zero_grad();
        Tensor loss = loss_fn(net->construct(x), y);
        loss.backward();
        opt->step();
        losses.push_back(loss.item<float>());
      }
    }
    return losses;
  };
  std::vector<float> eager = run(false), compiled = run(true);
  ASSERT_EQ(eager.size(), compiled.size());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_NEAR(eager[i], compiled[i], 1e-5) << "step " << i;
  EXPECT_LT(eager.back(), eager.front());
}

// At a few rows (batch-1 inference) the kernels split the hidden units over
// the threads for all the steps (on W_hh regrouped per call, the sequence
// being longer than 8 steps); at more rows they run a GEMM a step. Both
// give the same sequence, for every kind, direction and initial state, with
// hidden sizes that leave uneven shares and partial vectors, and one that
// does not.
TEST(Recurrent, FewRowsSplitOverThreadsMatchTheBatchedPath) {
  const int threads = get_num_threads();
  set_num_threads(2);
  manual_seed(3);
  for (const std::string kind : {"LSTM", "GRU", "RNN"}) {
    for (int64_t hidden : {36, 64, 75}) {
      nn::RecurrentOptions o;
      o.num_layers = 2;
      o.bidirectional = true;
      std::shared_ptr<nn::RecurrentLayer> layer;
      if (kind == "LSTM") layer = std::make_shared<nn::LSTM>(20, hidden, o);
      else if (kind == "GRU") layer = std::make_shared<nn::GRU>(20, hidden, o);
      else layer = std::make_shared<nn::RNN>(20, hidden, o);
      NoGradGuard no_grad;
      Tensor x = randn({9, 6, 20}), h0 = randn({4, 6, hidden}), c0 = randn({4, 6, hidden});
      const bool cell = kind == "LSTM";
      nn::RecurrentResult all = layer->forward(x, h0, cell ? c0 : Tensor());
      for (auto [from, rows] : {std::pair<int64_t, int64_t>{0, 1}, {2, 3}, {5, 1}}) {
        auto part = [&](const Tensor& t) { return t.slice(1, from, from + rows).contiguous(); };
        nn::RecurrentResult few = layer->forward(part(x), part(h0), cell ? part(c0) : Tensor());
        const std::string what = kind + " hidden " + std::to_string(hidden) + " rows " + std::to_string(from) + "+" +
                                 std::to_string(rows);
        auto expect_same = [&](const Tensor& got, const Tensor& want, const char* name) {
          auto g = got.to_vector<float>(), w = part(want).to_vector<float>();
          ASSERT_EQ(g.size(), w.size()) << what << " " << name;
          for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-5) << what << " " << name << " element " << i;
        };
        expect_same(few.output, all.output, "output");
        expect_same(few.h_n, all.h_n, "h_n");
        if (cell) expect_same(few.c_n, all.c_n, "c_n");
      }
    }
  }
  set_num_threads(threads);
}

// Inference graphs run float32 recurrent layers on weights prepared once
// (W_ih packed, the biases summed, W_hh in panels of 16 units): the same
// sequences as eager, at batch 1 (the units split over the threads in whole
// panels, the last partly filled) and at 6 (a GEMM a step), for every kind,
// both directions, with and without biases, and ONNX's GRU that applies the
// reset gate before its hidden product.
TEST(Recurrent, InferenceGraphsRunOnPreparedWeights) {
  const int threads = get_num_threads();
  set_num_threads(2);
  manual_seed(5);
  struct Layer {
    std::string op;
    int64_t gates;
    Attrs attrs;
  };
  const std::vector<Layer> layers = {{"lstm", 4, {}},
                                     {"gru", 3, {}},
                                     {"gru", 3, {{"linear_before_reset", false}}},
                                     {"rnn", 1, {{"nonlinearity", "relu"}}}};
  for (const Layer& l : layers)
    for (int64_t hidden : {40, 75})
      for (bool bias : {true, false})
        for (bool reverse : {false, true}) {
          const int64_t input = 12, gh = l.gates * hidden;
          Tensor w_ih = randn({gh, input}) * 0.3, w_hh = randn({gh, hidden}) * 0.2;
          Tensor b_ih = bias ? randn({gh}) * 0.1 : Tensor(), b_hh = bias ? randn({gh}) * 0.1 : Tensor();
          Attrs attrs = l.attrs;
          attrs.set("reverse", reverse);
          auto layer = [&](const std::vector<Tensor>& in) {
            std::vector<Tensor> args = {in[0], w_ih, w_hh, b_ih, b_hh, in[1]};
            if (l.op == "lstm") args.push_back(in[2]);
            std::vector<Tensor> out = call(l.op, args, attrs);
            out.resize(l.op == "lstm" ? 3 : 2);  // (not the reserve backward reads)
            return out;
          };
          for (int64_t n : {1, 6}) {
            const std::string what = l.op + " " + (l.attrs.has("linear_before_reset") ? "(reset first) " : "") +
                                     "hidden " + std::to_string(hidden) + (bias ? "" : " no bias") +
                                     (reverse ? " reverse" : "") + " batch " + std::to_string(n);
            const std::vector<Tensor> in = {randn({11, n, input}), randn({n, hidden}), randn({n, hidden})};
            jit::CompileOptions o;
            o.inference = true;
            auto fn = jit::compile(layer, in, o);
            fn(in);  // (the first call runs the traced ops)
            const std::vector<Tensor> got = fn(in), want = layer(in);
            EXPECT_NE(fn.report().str().find("gave 1 recurrent layers weights prepared once"), std::string::npos)
                << what << "\n"
                << fn.report().str();
            ASSERT_EQ(got.size(), want.size()) << what;
            for (size_t i = 0; i < got.size(); ++i) {
              auto g = got[i].to_vector<float>(), w = want[i].to_vector<float>();
              ASSERT_EQ(g.size(), w.size()) << what << " output " << i;
              for (size_t j = 0; j < g.size(); ++j)
                ASSERT_NEAR(g[j], w[j], 1e-5 * (1 + std::abs(w[j]))) << what << " output " << i << " element " << j;
            }
          }
        }
  set_num_threads(threads);
}

// train::Model in graph mode: the same epoch losses and evaluation as eager,
// a smaller last batch run on the training graph generalized over the batch.
#include <gtest/gtest.h>

#include "kiln/kiln.h"

namespace {
using namespace kiln;

struct ModeGuard {
  explicit ModeGuard(Mode m) { set_context({.mode = m}); }
  ~ModeGuard() { set_context({}); }
};

struct Outcome {
  std::vector<double> epoch_losses;
  train::EvalResult eval;
  train::Model::CompiledGraphs graphs;
};

// The mode set process-wide (kiln::set_context), or for the Model alone.
Outcome fit(Mode mode, bool per_model = false, const std::string& model_name = "cnn") {
  ModeGuard guard(per_model ? Mode::Eager : mode);
  manual_seed(11);
  Generator gen(4);
  Tensor x = randn({200, 1, 28, 28}, DType::Float32, &gen), y = randint(0, 10, {200}, DType::Int64, &gen);
  auto net = models::make_model(model_name);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.02, .momentum = 0.9});
  train::Model model(net, [](const Tensor& o, const Tensor& t) { return cross_entropy(o, t); }, opt);
  if (per_model) model.set_mode(mode);
  data::BatchIterator batches(data::TensorDataset(x, y), 64, true, false, 1);  // 3 batches of 64 and one of 8
  Outcome r;
  for (auto& e : model.train(2, batches)) r.epoch_losses.push_back(e.mean_loss);
  data::BatchIterator test(data::TensorDataset(x, y), 64, false);
  r.eval = model.eval(test);
  r.graphs = model.compiled_graphs();
  return r;
}

TEST(ModelGraphMode, TrainsAndEvaluatesLikeEager) {
  Outcome eager = fit(Mode::Eager), graph = fit(Mode::Graph);
  // Graph mode really ran compiled: one training graph, symbolic in the
  // batch (the last batch of 8 instantiates it), and inference graphs for
  // eval, whose prepared convolution weights keep them to one batch size
  // each (64 and 8); eager compiled nothing.
  EXPECT_EQ(graph.graphs.train_step, 1);
  EXPECT_EQ(graph.graphs.inference, 2);
  EXPECT_EQ(eager.graphs.train_step, 0);
  EXPECT_EQ(eager.graphs.inference, 0);
  ASSERT_EQ(graph.epoch_losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(graph.epoch_losses[i], eager.epoch_losses[i], 1e-4 * eager.epoch_losses[i]);
  EXPECT_NEAR(graph.eval.loss, eager.eval.loss, 1e-4 * eager.eval.loss);
  EXPECT_DOUBLE_EQ(graph.eval.accuracy, eager.eval.accuracy);
}

// A ResNet (batch norms and residual blocks on blocked activations): its
// short last batch runs on the one training graph too, with eager mode's
// losses.
TEST(ModelGraphMode, AResNetsShortLastBatchRunsOnItsOneGraph) {
  Outcome eager = fit(Mode::Eager, false, "resnet8"), graph = fit(Mode::Graph, false, "resnet8");
  EXPECT_EQ(graph.graphs.train_step, 1);
  ASSERT_EQ(graph.epoch_losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_NEAR(graph.epoch_losses[i], eager.epoch_losses[i], 1e-4 * eager.epoch_losses[i]);
  EXPECT_NEAR(graph.eval.loss, eager.eval.loss, 1e-3 * eager.eval.loss);
}

// A Model's own mode wins over the process-wide one, and leaves it alone:
// a graph-mode Model and an eager one can live in one process.
TEST(ModelGraphMode, ModeCanBeSetPerModel) {
  Outcome process_wide = fit(Mode::Graph), per_model = fit(Mode::Graph, true);
  EXPECT_EQ(context().mode, Mode::Eager);
  EXPECT_EQ(per_model.graphs.train_step, process_wide.graphs.train_step);
  EXPECT_EQ(per_model.graphs.inference, process_wide.graphs.inference);
  ASSERT_EQ(per_model.epoch_losses.size(), process_wide.epoch_losses.size());
  for (size_t i = 0; i < per_model.epoch_losses.size(); ++i)
    EXPECT_NEAR(per_model.epoch_losses[i], process_wide.epoch_losses[i], 1e-5 * process_wide.epoch_losses[i]);
  Outcome eager = fit(Mode::Eager, true);
  EXPECT_EQ(eager.graphs.train_step, 0);
}

}  // namespace

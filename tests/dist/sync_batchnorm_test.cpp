// Synchronized batch norm on 2 ranks, each with half of a batch, against
// plain batch norm on the whole batch in one process: the same outputs,
// input gradients and running statistics, and parameter gradients that add
// up to the whole batch's.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "support/ranks.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

Tensor batch() {
  Generator gen(3);
  return randn({8, 3, 4, 4}, DType::Float64, &gen) * 2.0 + 1.0;
}

Tensor weights_for_loss() {
  Generator gen(4);
  return randn({8, 3, 4, 4}, DType::Float64, &gen);
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& what) {
  auto a = got.contiguous().to_vector<double>(), b = want.contiguous().to_vector<double>();
  if (a.size() != b.size()) throw std::runtime_error(what + ": sizes differ");
  for (size_t i = 0; i < a.size(); ++i)
    if (std::abs(a[i] - b[i]) > 1e-9 * (1 + std::abs(b[i])))
      throw std::runtime_error(what + " differs at " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
                               std::to_string(b[i]));
}

std::shared_ptr<nn::BatchNorm2d> make_bn() {
  auto bn = std::make_shared<nn::BatchNorm2d>(3);
  NoGradGuard no_grad;
  bn->weight.copy_(from_vector<float>({1.5f, 0.5f, 2.f}, {3}));
  bn->bias.copy_(from_vector<float>({0.1f, -0.2f, 0.3f}, {3}));
  for (Tensor* t : {&bn->weight, &bn->bias, &bn->running_mean, &bn->running_var}) {
    const bool grad = t->requires_grad();
    *t = t->to(DType::Float64).detach();
    if (grad) t->set_requires_grad();
  }
  return bn;
}

TEST(SyncBatchNorm, TwoHalvesNormalizeLikeTheWholeBatch) {
  const int port = free_port();
  auto outcome = run_ranks({0, 1}, [&](int rank) {
    // The whole batch in this process, plainly.
    auto whole = make_bn();
    Tensor x = batch().set_requires_grad();
    Tensor y = (*whole)(x);
    sum(y * weights_for_loss()).backward();
    // This rank's half, synchronized with the other's.
    auto group = dist::init(as_rank(rank, 2, port));
    nn::SequentialCell net({make_bn()});
    if (nn::convert_sync_batchnorm(net, dist::handle_of(group)) != 1) throw std::runtime_error("not converted");
    auto& half_bn = dynamic_cast<nn::BatchNorm2d&>(*net.children()[0].second);
    Tensor mine = batch().slice(0, 4 * rank, 4 * rank + 4).contiguous().set_requires_grad();
    Tensor half = net(mine);
    sum(half * weights_for_loss().slice(0, 4 * rank, 4 * rank + 4)).backward();
    expect_close(half, y.slice(0, 4 * rank, 4 * rank + 4), "output");
    expect_close(mine.grad(), x.grad().slice(0, 4 * rank, 4 * rank + 4), "input gradient");
    expect_close(half_bn.running_mean, whole->running_mean, "running mean");
    expect_close(half_bn.running_var, whole->running_var, "running variance");
    Tensor wg = half_bn.weight.grad().clone(), bg = half_bn.bias.grad().clone();
    group->all_reduce(wg);
    group->all_reduce(bg);
    expect_close(wg, whole->weight.grad(), "weight gradient over the ranks");
    expect_close(bg, whole->bias.grad(), "bias gradient over the ranks");
    // Evaluation uses the running statistics, with no communication.
    net.set_train(false);
    whole->set_train(false);
    expect_close(net(mine), (*whole)(x).slice(0, 4 * rank, 4 * rank + 4), "evaluation output");
  });
  expect_all_succeeded(outcome);
}

}  // namespace

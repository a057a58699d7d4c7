// Data parallelism against one process: W2 (SGD, momentum 0.9) on 2 ranks, each on its half of
// every global batch of 64, must reach the parameters that 1 rank reaches
// with the whole batch, after 20 steps, in eager and in graph mode; its
// evaluation, reduced over the ranks, must equal the whole-set one; only
// rank 0 writes files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/callbacks.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/train.h"
#include "support/ranks.h"

using namespace kiln;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kSamples = 1280, kGlobalBatch = 64;  // 20 steps

data::TensorDataset synthetic_images() {
  // Each class its own pattern under noise: learnable, so training settles
  // instead of amplifying rounding differences as random labels would.
  Generator gen(7);
  Tensor patterns = randn({10, 1, 28, 28}, DType::Float32, &gen);
  Tensor y = randint(0, 10, {kSamples}, DType::Int64, &gen);
  Tensor x = index_select(patterns, 0, y) + randn({kSamples, 1, 28, 28}, DType::Float32, &gen);
  return {x, y};
}

// Rank r of n takes rows r, r+n, r+2n, ...: DistributedSampler's shards
// without shuffling, so that batch k of every rank together is global batch k.
data::TensorDataset shard(const data::TensorDataset& all, int64_t rank, int64_t ranks) {
  return {all.inputs.slice(0, rank, kSamples, ranks).contiguous(), all.labels.slice(0, rank, kSamples, ranks).contiguous()};
}

struct Trained {
  std::vector<float> params;
  train::EvalResult eval;
};

Trained train_w2(Mode mode, std::shared_ptr<dist::ProcessGroup> group, const std::string& log) {
  set_num_threads(1);
  const int64_t ranks = group ? group->size() : 1, rank = group ? group->rank() : 0;
  manual_seed(rank == 0 ? 1 : 99);  // rank 1 starts elsewhere: DataParallel copies rank 0's weights
  auto net = models::make_model("cnn");
  data::TensorDataset mine = shard(synthetic_images(), rank, ranks);
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{0.01, 0.9});
  train::Model model(net, std::make_shared<nn::CrossEntropyLoss>(), opt);
  model.set_mode(mode);
  model.set_adapt_threads(false);
  if (group) model.set_data_parallel(std::make_shared<train::DataParallel>(net, group));
  data::BatchIterator batches(mine, kGlobalBatch / ranks, /*shuffle=*/false);
  model.train(1, batches, {std::make_shared<train::MetricsLogger>(log)});
  data::BatchIterator whole(mine, 100, false);
  Trained t;
  t.eval = model.eval(whole);
  for (auto& [name, p] : net->parameters_and_names())
    for (float v : p.contiguous().to_vector<float>()) t.params.push_back(v);
  return t;
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

void two_ranks_step_like_one(Mode mode) {
  const std::string dir = ::testing::TempDir() + "/kiln_dp_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  // The reference trains in a child too: the ranks are forked, and a parent
  // that has started OpenMP's threads cannot fork safely.
  auto reference = run_ranks({0}, [&](int) {
    Trained t = train_w2(mode, nullptr, dir + "/ref.csv");
    t.params.push_back(static_cast<float>(t.eval.loss));
    t.params.push_back(static_cast<float>(t.eval.accuracy));
    write_floats(dir + "/ref.bin", t.params);
  });
  ASSERT_EQ(reference.status[0], 0) << reference.messages[0];
  const int port = free_port();
  auto outcome = run_ranks({0, 1}, [&](int rank) {
    auto group = dist::init(as_rank(rank, 2, port));
    Trained t = train_w2(mode, group, dir + "/rank" + std::to_string(rank) + ".csv");
    std::vector<float> want = read_floats(dir + "/ref.bin");
    const float accuracy = want.back(), loss = want[want.size() - 2];
    want.resize(want.size() - 2);
    if (t.params.size() != want.size()) throw std::runtime_error("parameter count differs");
    // Float tolerance: the sums run in another order (two means of 32 rows
    // against one of 64), and two runs of one process in different address
    // layouts already differ by about 5e-6 here.
    double worst = 0, diff2 = 0, norm2 = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double d = double(t.params[i]) - want[i];
      worst = std::max(worst, std::abs(d));
      diff2 += d * d;
      norm2 += double(want[i]) * want[i];
    }
    if (worst > 1e-4 || std::sqrt(diff2 / norm2) > 1e-4)
      throw std::runtime_error("parameters differ from one rank's by up to " + std::to_string(worst) + " (relative norm " +
                               std::to_string(std::sqrt(diff2 / norm2)) + ")");
    if (std::abs(t.eval.accuracy - accuracy) > 1.5 / kSamples || std::abs(t.eval.loss - loss) > 1e-4 * std::abs(loss))
      throw std::runtime_error("evaluation over the ranks " + std::to_string(t.eval.loss) + " / " +
                               std::to_string(t.eval.accuracy) + ", over the whole set " + std::to_string(loss) + " / " +
                               std::to_string(accuracy));
  });
  expect_all_succeeded(outcome);
  EXPECT_TRUE(std::filesystem::exists(dir + "/rank0.csv"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/rank1.csv")) << "a rank other than 0 wrote its metrics file";
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, TwoRanksStepLikeOneWithTheWholeBatchEager) { two_ranks_step_like_one(Mode::Eager); }
TEST(DataParallel, TwoRanksStepLikeOneWithTheWholeBatchGraph) { two_ranks_step_like_one(Mode::Graph); }

// Parameters on a device the group's backend does not move are refused at
// once, naming the device, the backend and what to do, not at the first
// all-reduce in the middle of backward.
TEST(DataParallel, RefusesParametersOnADeviceItsBackendDoesNotMove) {
  auto group = dist::init(as_rank(0, 1, free_port()));
  auto net = models::make_model("mlp");
  net->to(parse_device("reference"));
  const std::string m = message_of([&] { train::DataParallel dp(net, group); });
  EXPECT_NE(m.find("is on reference:0, which the process group's backend 'gloo' does not move"), std::string::npos)
      << m;
  EXPECT_NE(m.find("move the network to the CPU first"), std::string::npos) << m;
}

}  // namespace

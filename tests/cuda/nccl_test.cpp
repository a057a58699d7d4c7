// Process groups over NCCL (libkiln_nccl, which dist::init loads for
// "nccl"): a one-rank world on the GPU (the test machine has one; NCCL
// refuses two ranks on one GPU), collectives ordered after the kernels that
// wrote their input, CPU tensors through Gloo, and data parallelism on CUDA
// stepping exactly like training without it. The multi-rank logic around
// the group (buckets, their order, the loss riding along) is DataParallel's
// own, tested over Gloo with several ranks. Without a GPU, init says so.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/gpus.h"
#include "kiln/backend.h"
#include "kiln/data_parallel.h"
#include "kiln/dist.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/train.h"
#include "support/error_message.h"
#include "support/ranks.h"

namespace kiln {
namespace {

using testing::as_rank;
using testing::free_port;
using testing::message_of;

const Device kGpu{DeviceType::CUDA, 0};

dist::InitOptions nccl_world() {
  dist::InitOptions o = as_rank(0, 1, free_port());
  o.backend = "nccl";
  return o;
}

std::vector<float> host(const Tensor& t) { return t.to(cpu_device()).to(DType::Float32).to_vector<float>(); }

Tensor x_of(DType dtype) { return arange(0, 12, 1, dtype).reshape({3, 4}); }

TEST(Nccl, InitWithoutAGpuSaysSo) {
  if (testing::gpus() > 0) GTEST_SKIP() << "this machine has a GPU";
  const std::string m = message_of([] { dist::init(nccl_world()); });
  EXPECT_NE(m.find("backend 'nccl' runs collectives on CUDA devices, and this machine has none"), std::string::npos)
      << m;
  EXPECT_NE(m.find("use backend 'gloo'"), std::string::npos) << m;
}

TEST(Nccl, OneRankCollectivesOnTheGpu) {
  NEEDS_A_GPU();
  auto group = dist::init(nccl_world());
  EXPECT_EQ(group->backend(), "nccl");
  EXPECT_EQ(group->size(), 1);
  EXPECT_TRUE(group->takes(kGpu));
  EXPECT_TRUE(group->takes(cpu_device()));
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Int64}) {
    const Tensor x = x_of(dtype);
    const std::vector<float> want = host(x);
    for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Max, dist::ReduceOp::Min}) {
      Tensor t = x.to(kGpu);
      group->all_reduce(t, op);
      EXPECT_EQ(host(t), want) << dtype_name(dtype);
    }
    Tensor b = x.to(kGpu);
    group->broadcast(b, 0);
    EXPECT_EQ(host(b), want);
    const Tensor gathered = group->all_gather(x.to(kGpu));
    EXPECT_EQ(gathered.shape(), (Shape{1, 3, 4}));
    EXPECT_EQ(host(gathered), want);
    EXPECT_EQ(host(group->reduce_scatter(x.to(kGpu))), want);
  }
  Tensor mean = from_vector<float>({1.5f, -2}, {2}).to(kGpu);
  group->all_reduce(mean, dist::ReduceOp::Mean);
  EXPECT_EQ(host(mean), (std::vector<float>{1.5f, -2}));
  // CPU tensors go through Gloo, in the same group.
  Tensor on_host = from_vector<double>({4, 5}, {2});
  group->all_reduce(on_host);
  EXPECT_EQ(on_host.to_vector<double>(), (std::vector<double>{4, 5}));
  group->barrier();

  // Refused with what to do: a view, bool, Mean of integers; and the
  // collectives counted once the device has passed them.
  Tensor view = x_of(DType::Float32).to(kGpu).transpose(0, 1);
  std::string m = message_of([&] { group->all_reduce(view); });
  EXPECT_NE(m.find("over NCCL takes a contiguous tensor on cuda:0"), std::string::npos) << m;
  Tensor flags = ones({4}, DType::Bool, kGpu);
  m = message_of([&] { group->all_reduce(flags); });
  EXPECT_NE(m.find("cannot reduce bool tensors"), std::string::npos) << m;
  Tensor counts = ones({4}, DType::Int64, kGpu);
  m = message_of([&] { group->all_reduce(counts, dist::ReduceOp::Mean); });
  EXPECT_NE(m.find("with Mean takes a floating tensor"), std::string::npos) << m;
  backend(DeviceType::CUDA).synchronize(0);
  EXPECT_GT(group->stats().collectives, 20);
}

// A collective on the communication stream starts only after the kernels
// the caller queued before it, and what the caller queues after waiting for
// it sees its result.
TEST(Nccl, CollectivesAreOrderedWithTheCallersKernels) {
  NEEDS_A_GPU();
  auto group = dist::init(nccl_world());
  const Tensor a = ones({4096, 4096}, DType::Float32, kGpu);
  for (int round = 0; round < 3; ++round) {
    const Tensor y = matmul(a, a);  // every element 4096, written well after this line returns
    Tensor out = Tensor::empty({1, 4096, 4096}, DType::Float32, kGpu);
    dist::Work work = group->all_gather_async(out, y);
    work.wait();
    const std::vector<float> got = host(out.reshape({4096 * 4096}).slice(0, 0, 4096 * 4096, 4096 * 4096 / 64));
    for (float v : got) ASSERT_EQ(v, 4096.0f) << "round " << round;
    EXPECT_TRUE(work.completed());
  }
}

// W1's MLP trained with DataParallel over a one-rank NCCL group on the GPU
// steps exactly as it does without (the mean of one rank is its gradient),
// in eager and graph mode.
std::vector<float> train_mlp(Mode mode, std::shared_ptr<dist::ProcessGroup> group) {
  manual_seed(11);
  models::ModelConfig config;
  config.hidden = {64, 32};
  auto net = models::make_model("mlp", config);
  net->to(kGpu);
  Generator gen(12);
  data::TensorDataset set{randn({640, 1, 28, 28}, DType::Float32, &gen), randint(0, 10, {640}, DType::Int64, &gen)};
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{0.05, 0.9});
  train::Model model(net, std::make_shared<nn::CrossEntropyLoss>(), opt);
  model.set_mode(mode);
  if (group) model.set_data_parallel(std::make_shared<train::DataParallel>(net, group));
  data::BatchIterator batches(set, 64, /*shuffle=*/false);
  model.train(1, batches, {});
  std::vector<float> params;
  for (const Tensor& p : net->trainable_params())
    for (float v : host(p)) params.push_back(v);
  return params;
}

TEST(Nccl, DataParallelOnTheGpuStepsLikeTrainingWithoutIt) {
  NEEDS_A_GPU();
  auto group = dist::init(nccl_world());
  for (Mode mode : {Mode::Eager, Mode::Graph}) {
    const int64_t before = fallback_count();
    const std::vector<float> with = train_mlp(mode, group), without = train_mlp(mode, nullptr);
    EXPECT_EQ(fallback_count(), before) << "ops of the data-parallel step ran on the CPU";
    ASSERT_EQ(with.size(), without.size());
    for (size_t i = 0; i < with.size(); ++i)
      ASSERT_NEAR(with[i], without[i], 1e-6f * std::max(1.0f, std::fabs(without[i]))) << "parameter value " << i;
  }
}

}  // namespace
}  // namespace kiln

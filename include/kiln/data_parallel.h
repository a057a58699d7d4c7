#pragma once
// Data-parallel training: every rank holds the whole network, trains on its
// own share of each global batch, and the ranks average their gradients, so
// that N ranks with batch B each step like one process with batch N*B.
//
//   auto group = kiln::dist::init();
//   auto dp = std::make_shared<kiln::train::DataParallel>(net, group);  // rank 0's weights everywhere
//   model.set_data_parallel(dp);                                        // or, by hand:
//   dp->backward(loss); optimizer->step();
//
// Gradients are averaged in buckets (a small first one, then about 25 MB
// each, parameters taken from the output end, as backward produces them).
// A bucket's all-reduce starts as soon as backward has produced all its
// gradients and runs on the group's communication thread while backward
// goes on; only the optimizer's update waits for it. In graph mode the
// compiled step issues the same bucket all-reduces itself, as ops.
#include <memory>
#include <unordered_map>
#include <vector>

#include "kiln/dist.h"
#include "kiln/nn.h"

namespace kiln::train {

struct DataParallelOptions {
  int64_t first_bucket_bytes = int64_t{1} << 20;
  int64_t bucket_bytes = int64_t{25} << 20;
  // Copy rank 0's parameters and buffers to every rank at the start.
  bool broadcast_from_rank0 = true;
};

class DataParallel {
 public:
  DataParallel(std::shared_ptr<nn::Cell> net, std::shared_ptr<dist::ProcessGroup> group, DataParallelOptions options = {});

  // loss.backward(), with every trainable parameter's .grad then the mean of
  // the ranks' gradients. Returns the mean of the ranks' losses, which rides
  // in the last bucket. Call it once per optimizer step on every rank.
  double backward(const Tensor& loss);
  // autograd::grad(loss, params), the network's parameters among them
  // averaged over the ranks, and the ranks' mean loss (0-d) in *mean_loss:
  // the compiled training step's form (its ops are traced), which runs
  // eagerly too.
  std::vector<Tensor> grad(const Tensor& loss, const std::vector<Tensor>& params, Tensor* mean_loss = nullptr);
  // Copies rank 0's parameters and buffers to every rank.
  void broadcast_parameters();
  // Per-rank numbers summed over the ranks (metric counts, loss sums).
  std::vector<double> sum(const std::vector<double>& values);

  const std::shared_ptr<dist::ProcessGroup>& group() const { return group_; }
  // The group the gradient buckets are all-reduced in (the same ranks).
  const std::shared_ptr<dist::ProcessGroup>& buckets_group() const { return buckets_group_; }
  // Rank 0 writes checkpoints and metrics files; the others do not.
  bool writes() const { return group_->rank() == 0; }
  int bucket_count() const { return static_cast<int>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // positions in params_
    int64_t numel = 0;
  };
  class Pass;
  std::shared_ptr<nn::Cell> net_;
  std::shared_ptr<dist::ProcessGroup> group_, buckets_group_;
  int64_t handle_;
  std::vector<Tensor> params_;  // trainable, from the output end
  std::unordered_map<const TensorImpl*, size_t> position_;
  std::vector<size_t> bucket_of_;
  std::vector<Bucket> buckets_;
};

}  // namespace kiln::train

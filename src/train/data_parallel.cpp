// DataParallel: bucketed gradient averaging that starts during backward.
#include "kiln/data_parallel.h"

#include "kiln/autograd.h"
#include "kiln/functional.h"

namespace kiln::train {

DataParallel::DataParallel(std::shared_ptr<nn::Cell> net, std::shared_ptr<dist::ProcessGroup> group,
                           DataParallelOptions options)
    : net_(std::move(net)), group_(std::move(group)) {
  KILN_CHECK(net_ && group_, "DataParallel needs a network and a process group (from kiln::dist::init)");
  // The buckets get a group (a Gloo context and a thread) of their own, so
  // that collectives on the caller's group in the middle of backward
  // (synchronized batch norm's) do not queue behind a bucket's all-reduce.
  std::vector<int> everyone(static_cast<size_t>(group_->size()));
  for (int r = 0; r < group_->size(); ++r) everyone[static_cast<size_t>(r)] = r;
  buckets_group_ = group_->new_group(everyone);
  handle_ = dist::handle_of(buckets_group_);
  std::vector<Tensor> trainable = net_->trainable_params();
  params_.assign(trainable.rbegin(), trainable.rend());  // backward meets the last layers first
  // Buckets of one dtype each, filled in that order. A small network still
  // gets about four, so that its first all-reduces start under backward.
  int64_t total = 0;
  for (const Tensor& p : params_) total += p.numel() * static_cast<int64_t>(p.element_size());
  const bool small = total < 4 * options.first_bucket_bytes;
  const int64_t quarter = std::max<int64_t>(total / 4, 1);
  int64_t limit = small ? quarter : options.first_bucket_bytes, bytes = 0;
  DType dtype = DType::Float32;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    KILN_CHECK(group_->takes(p.device()), "DataParallel: parameter ", p.meta_str(), " is on ", p.device().str(),
               ", which the process group's backend '", group_->backend(), "' does not move; ",
               p.device().type != DeviceType::CUDA ? "move the network to the CPU first (gloo moves CPU tensors)"
               : group_->backend() == "nccl"
                   ? "each rank trains on the GPU of its local rank: move the network to cuda:LOCAL_RANK"
                   : "join with backend 'nccl' (dist::init, or distributed.backend in a recipe) for CUDA tensors");
    const int64_t size = p.numel() * static_cast<int64_t>(p.element_size());
    if (buckets_.empty() || bytes >= limit || p.dtype() != dtype) {
      if (!buckets_.empty() && !small) limit = options.bucket_bytes;
      buckets_.emplace_back();
      bytes = 0;
      dtype = p.dtype();
    }
    buckets_.back().params.push_back(i);
    buckets_.back().numel += p.numel();
    bytes += size;
    position_[&p.impl()] = i;
    bucket_of_.push_back(buckets_.size() - 1);
  }
  if (options.broadcast_from_rank0) broadcast_parameters();
}

void DataParallel::broadcast_parameters() {
  NoGradGuard no_grad;
  std::vector<dist::Work> works;
  for (auto& [name, p] : net_->parameters_and_names()) works.push_back(group_->broadcast_async(p, 0));
  for (auto& [name, b] : net_->buffers_and_names()) works.push_back(group_->broadcast_async(b, 0));
  for (auto& w : works) w.wait();
}

std::vector<double> DataParallel::sum(const std::vector<double>& values) {
  Tensor t = from_vector<double>(values, {static_cast<int64_t>(values.size())});
  group_->all_reduce(t);
  return t.to_vector<double>();
}

// One backward pass: gradients noted as they become ready, each bucket's
// all-reduce started once it is full and every bucket before it started
// (so every rank starts them in the same order), all waited for at the end.
// The loss rides at the end of the last bucket, so the ranks' mean loss
// costs no collective of its own.
class DataParallel::Pass {
 public:
  Pass(DataParallel& dp, const Tensor& loss)
      : dp_(dp), loss_(loss.detach()), grads_(dp.params_.size()), buffers_(dp.buckets_.size()) {
    for (auto& b : dp.buckets_) waiting_.push_back(static_cast<int64_t>(b.params.size()));
  }

  void ready(const TensorImpl* leaf, const Tensor& grad) {
    auto it = dp_.position_.find(leaf);
    if (it == dp_.position_.end()) return;
    grads_[it->second] = grad;
    --waiting_[dp_.bucket_of_[it->second]];
    start_ready();
  }

  // The averaged gradients, by position; buckets with gradients still
  // missing (parameters this rank did not use) start now, with zeros.
  std::vector<Tensor> finish(Tensor& mean_loss) {
    for (auto& w : waiting_) w = 0;
    start_ready();
    if (buffers_.empty()) {  // nothing to train: the loss alone
      mean_loss = loss_.to(DType::Float64).reshape({1}).clone();
      all_reduce_start(mean_loss, dp_.handle_, "mean");
      all_reduce_wait(mean_loss);
      mean_loss = mean_loss.reshape({}).to(loss_.dtype());
    }
    std::vector<Tensor> averaged(dp_.params_.size());
    for (size_t b = 0; b < buffers_.size(); ++b) {
      all_reduce_wait(buffers_[b]);
      int64_t offset = 0;
      for (size_t i : dp_.buckets_[b].params) {
        const Tensor& p = dp_.params_[i];
        averaged[i] = buffers_[b].slice(0, offset, offset + p.numel()).reshape(p.shape());
        offset += p.numel();
      }
      if (b + 1 == buffers_.size()) mean_loss = buffers_[b].slice(0, offset, offset + 1).reshape({}).to(loss_.dtype());
    }
    return averaged;
  }

 private:
  void start_ready() {
    while (started_ < buffers_.size() && waiting_[started_] == 0) start(started_++);
  }

  void start(size_t b) {
    std::vector<Tensor> parts;
    for (size_t i : dp_.buckets_[b].params) {
      const Tensor& p = dp_.params_[i];
      parts.push_back(grads_[i].defined() ? grads_[i].reshape({p.numel()}) : zeros({p.numel()}, p.dtype(), p.device()));
    }
    if (b + 1 == buffers_.size()) parts.push_back(loss_.to(parts[0].dtype()).reshape({1}));
    // A copy: the reduction writes its buffer, and a gradient may be shared.
    buffers_[b] = parts.size() == 1 ? parts[0].clone() : concat(parts);
    all_reduce_start(buffers_[b], dp_.handle_, "mean");
  }

  DataParallel& dp_;
  Tensor loss_;
  std::vector<Tensor> grads_;
  std::vector<int64_t> waiting_;
  std::vector<Tensor> buffers_;
  size_t started_ = 0;
};

double DataParallel::backward(const Tensor& loss) {
  Pass pass(*this, loss);
  {
    autograd::LeafGradientListener listen([&](TensorImpl* leaf, const Tensor& g) { pass.ready(leaf, g); });
    loss.backward();
  }
  NoGradGuard no_grad;
  Tensor mean_loss;
  std::vector<Tensor> averaged = pass.finish(mean_loss);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].impl().grad = averaged[i].impl_ptr();
  return mean_loss.item<double>();
}

std::vector<Tensor> DataParallel::grad(const Tensor& loss, const std::vector<Tensor>& params, Tensor* mean_loss) {
  Pass pass(*this, loss);
  std::vector<Tensor> grads;
  {
    autograd::LeafGradientListener listen([&](TensorImpl* leaf, const Tensor& g) { pass.ready(leaf, g); });
    grads = autograd::grad({loss}, params);
  }
  NoGradGuard no_grad;
  Tensor averaged_loss;
  std::vector<Tensor> averaged = pass.finish(averaged_loss);
  if (mean_loss) *mean_loss = averaged_loss;
  for (size_t k = 0; k < params.size(); ++k) {
    auto it = position_.find(&params[k].impl());
    if (it != position_.end()) grads[k] = averaged[it->second];
  }
  return grads;
}

}  // namespace kiln::train

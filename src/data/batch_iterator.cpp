#include <algorithm>
#include <cstring>
#include <numeric>

#include "kiln/data.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

BatchIterator::BatchIterator(TensorDataset dataset, int64_t batch_size, bool shuffle, bool drop_remainder,
                             uint64_t seed)
    : dataset_(std::move(dataset)), batch_size_(batch_size), shuffle_(shuffle), drop_remainder_(drop_remainder),
      seed_(seed) {
  KILN_CHECK(batch_size > 0, "batch size must be positive, got ", batch_size);
  KILN_CHECK(dataset_.inputs.defined() && dataset_.labels.defined() &&
                 dataset_.labels.shape()[0] == dataset_.inputs.shape()[0],
             "a dataset needs inputs and labels with the same number of samples");
  dataset_.inputs = dataset_.inputs.contiguous();
  dataset_.labels = dataset_.labels.contiguous();
  for (Tensor& column : dataset_.extras) column = column.contiguous();
}

void BatchIterator::start_epoch() {
  ++epoch_;
  pos_ = 0;
  order_ = sampler_ ? sampler_->indices(dataset_.size(), epoch_)
         : shuffle_ ? RandomSampler(seed_).indices(dataset_.size(), epoch_)
                    : SequentialSampler().indices(dataset_.size(), epoch_);
}

void BatchIterator::shard(int64_t num_shards, int64_t shard_id, bool pad) {
  sampler_ = std::make_shared<DistributedSampler>(num_shards, shard_id, shuffle_, seed_, pad);
  epoch_ = -1;
}

void BatchIterator::skip_batches(int64_t count) {
  if (epoch_ < 0) start_epoch();
  pos_ = std::min(static_cast<int64_t>(order_.size()), pos_ + count * batch_size_);
}

int64_t BatchIterator::batches_per_epoch() const {
  int64_t n = sampler_ ? sampler_->count(dataset_.size()) : dataset_.size();
  return drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

namespace {
// Copies the rows `idx` of t (contiguous, first axis = samples) into a new tensor.
Tensor gather_rows(const Tensor& t, const int64_t* idx, int64_t count) {
  Shape s = t.shape();
  s[0] = count;
  Tensor out = Tensor::empty(s, t.dtype());
  size_t row = static_cast<size_t>(t.numel() / std::max<int64_t>(t.shape()[0], 1)) * t.element_size();
  const char* src = static_cast<const char*>(t.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t i = 0; i < count; ++i) std::memcpy(dst + i * row, src + idx[i] * row, row);
  return out;
}
}  // namespace

bool BatchIterator::next(Batch& batch) {
  if (epoch_ < 0) start_epoch();
  int64_t n = static_cast<int64_t>(order_.size());
  int64_t remaining = n - pos_;
  if (remaining <= 0 || (drop_remainder_ && remaining < batch_size_)) return false;
  int64_t count = std::min(batch_size_, remaining);
  batch.inputs = gather_rows(dataset_.inputs, order_.data() + pos_, count);
  batch.labels = gather_rows(dataset_.labels, order_.data() + pos_, count);
  batch.extras.clear();
  for (const Tensor& column : dataset_.extras) batch.extras.push_back(gather_rows(column, order_.data() + pos_, count));
  pos_ += count;
  return true;
}

}  // namespace kiln::data

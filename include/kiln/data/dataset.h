#pragma once
// Datasets: random-access sources of samples, and the batch sources that
// Model::train and Model::eval consume.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/sampler.h"

#include "kiln/generator.h"
#include "kiln/tensor.h"

namespace kiln::data {

// One sample: the model's input and its target (a class index, a token
// sequence, ...). Transforms change either.
struct Sample {
  Tensor input;
  Tensor label;
  // Further columns, in order (a sample weight, a mask, a second input):
  // the pipeline maps, batches and hands them on like the first two.
  std::vector<Tensor> extra{};
};

// A dataset with a known size and random access. get() is called from the
// pipeline's worker threads at once, so it must not change shared state.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Sample get(int64_t index) const = 0;
};

// Inputs and labels held in memory, first axis = samples.
class TensorDataset : public Dataset {
 public:
  TensorDataset() = default;
  // `extras_`: further columns, each with a row per sample.
  TensorDataset(Tensor inputs_, Tensor labels_, std::vector<Tensor> extras_ = {});
  int64_t size() const override { return inputs.defined() ? inputs.shape()[0] : 0; }
  Sample get(int64_t index) const override;

  Tensor inputs;
  Tensor labels;
  std::vector<Tensor> extras;
};

// The samples of `source` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> source, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Sample get(int64_t index) const override;

 private:
  std::shared_ptr<const Dataset> source_;
  std::vector<int64_t> indices_;
};

// Splits a dataset by a seeded permutation: the first part gets 1 -
// held_out_fraction of the samples, the second the rest.
std::pair<std::shared_ptr<Subset>, std::shared_ptr<Subset>> random_split(std::shared_ptr<const Dataset> source,
                                                                         double held_out_fraction, uint64_t seed);

struct Batch {
  Tensor inputs;
  Tensor labels;
  std::vector<Tensor> extras{};  // the samples' further columns, stacked
};

// What the training loop reads: batches, epoch after epoch.
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual void start_epoch() = 0;            // the next epoch (the first call starts epoch 0)
  virtual bool next(Batch& batch) = 0;       // false at the end of the epoch
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t batch_size() const = 0;
  // The next start_epoch() starts epoch `epoch` (from 0): resuming a run
  // replays its data order, since sources derive it from (seed, epoch).
  virtual void set_epoch(int64_t epoch) = 0;
  // Passes over the next `count` batches of this epoch.
  virtual void skip_batches(int64_t count) {
    Batch b;
    for (int64_t i = 0; i < count && next(b); ++i) {
    }
  }
};

// The fast path for data already in memory as tensors: gathers rows, with no
// transforms, reshuffling every epoch with its own generator.
class BatchIterator : public BatchSource {
 public:
  BatchIterator(TensorDataset dataset, int64_t batch_size, bool shuffle, bool drop_remainder = false,
                uint64_t seed = 0);
  void start_epoch() override;  // a new order (RandomSampler(seed) of the epoch) when shuffling
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return batch_size_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch - 1; }
  void skip_batches(int64_t count) override;
  const TensorDataset& dataset() const { return dataset_; }
  // Takes one shard of every epoch's order (DistributedSampler: the same
  // shuffle on every rank, rows rank, rank + shards, ...), for
  // data-parallel training; `pad` repeats rows so every shard has as many.
  void shard(int64_t num_shards, int64_t shard_id, bool pad = true);

 private:
  TensorDataset dataset_;
  int64_t batch_size_;
  bool shuffle_, drop_remainder_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::shared_ptr<const Sampler> sampler_;  // null: sequential or shuffled by seed
  std::vector<int64_t> order_;
  int64_t pos_ = 0;
};

// Stacks samples into a batch. Every input (and every label) must have the
// same shape and dtype; the error names the first sample that differs.
Batch collate(const std::vector<Sample>& samples);

}  // namespace kiln::data

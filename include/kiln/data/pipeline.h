#pragma once
// The dataset pipeline, in the spirit of MindSpore's: a random-access source,
// then a sampler (shuffle or shard), skip/take, per-sample transforms run by
// parallel workers, batching, repetition and prefetching.
//
//   data::Pipeline train(std::make_shared<data::TensorDataset>(...));
//   train.map({vision::random_crop(28, 2), vision::random_horizontal_flip()})
//        .shuffle(1).batch(64, true).num_parallel_workers(2).prefetch(4);
//   model.train(5, train);
//
// The stages always run in that order, whatever the order of the calls.
// Results depend only on the seeds, never on the number of workers: the order
// comes from the sampler, and each sample's transforms draw from their own
// generator seeded by (seed, epoch, position).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/dataset.h"
#include "kiln/data/sampler.h"

namespace kiln::data {

// A per-sample transform. `name` appears in error messages.
struct Transform {
  std::string name;
  std::function<Tensor(const Tensor& value, Generator& gen)> apply;
};

enum class Column { Input, Label };

class Pipeline : public BatchSource {
 public:
  explicit Pipeline(std::shared_ptr<const Dataset> source);
  Pipeline(const Pipeline& other);  // copies the configuration, not the running workers
  Pipeline& operator=(const Pipeline&) = delete;
  ~Pipeline() override;

  // Appends transforms for one column; they run in the order given.
  Pipeline& map(std::vector<Transform> transforms, Column column = Column::Input);
  // The same for a column by position: 0 the input, 1 the label, 2 and on
  // the samples' further columns (Sample::extra).
  Pipeline& map(std::vector<Transform> transforms, size_t column);
  // A new random order every epoch (RandomSampler(seed)); also seeds the transforms.
  Pipeline& shuffle(uint64_t seed);
  Pipeline& sampler(std::shared_ptr<const Sampler> sampler);
  // Seeds the random transforms when there is no shuffle.
  Pipeline& seed(uint64_t seed);
  // Called before batch(): counts samples; after batch(): counts batches.
  Pipeline& skip(int64_t count);
  Pipeline& take(int64_t count);
  Pipeline& batch(int64_t size, bool drop_remainder = false);
  // One epoch = `count` passes over the (sampled, skipped, taken) data, each in a new order.
  Pipeline& repeat(int64_t count);
  // 0 runs everything in the consuming thread.
  Pipeline& num_parallel_workers(int workers);
  // Batches prepared ahead of the consumer (at least 1).
  Pipeline& prefetch(int batches);

  void start_epoch() override;
  bool next(Batch& batch) override;
  int64_t batches_per_epoch() const override;
  int64_t batch_size() const override { return batch_size_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch - 1; }
  int64_t samples_per_epoch() const;

  // One sample after the transforms, as epoch 0 would produce it at `position`.
  Sample sample(int64_t position) const;

 private:
  struct Plan;     // the epoch's batches: which indices, which positions
  struct Workers;  // threads and the slots they fill
  std::vector<int64_t> pass_order(int64_t pass) const;
  int64_t pass_length() const;  // pass_order's size, without drawing the order
  Batch make_batch(const Plan& plan, int64_t b) const;
  Sample load(int64_t index, uint64_t epoch, int64_t position) const;
  void stop_workers();

  std::shared_ptr<const Dataset> source_;
  std::shared_ptr<const Sampler> sampler_;
  std::vector<std::vector<Transform>> column_transforms_;  // by column position
  uint64_t seed_ = 0;
  int64_t skip_ = 0, take_ = -1;
  int64_t batch_size_ = 1;
  bool batched_ = false, drop_remainder_ = false;
  int64_t repeat_ = 1;
  int workers_ = 1, prefetch_ = 2;

  int64_t epoch_ = -1;
  std::shared_ptr<Plan> plan_;
  std::unique_ptr<Workers> running_;
  int64_t cursor_ = 0;
};

}  // namespace kiln::data

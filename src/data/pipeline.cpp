#include "kiln/data/pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "kiln/autograd.h"
#include "kiln/thread_governor.h"

namespace kiln::data {

struct Pipeline::Plan {
  uint64_t epoch = 0;
  std::vector<std::vector<int64_t>> indices;  // dataset indices, per batch
  std::vector<int64_t> first_position;        // epoch position of each batch's first sample
};

struct Pipeline::Workers {
  std::mutex mu;
  std::condition_variable produced, consumed;
  std::map<int64_t, Batch> ready;
  std::map<int64_t, std::exception_ptr> failed;
  int64_t next_to_make = 0;
  int64_t cursor = 0;
  bool stop = false;
  std::vector<std::thread> threads;
};

Pipeline::Pipeline(std::shared_ptr<const Dataset> source)
    : source_(std::move(source)), sampler_(std::make_shared<SequentialSampler>()) {
  KILN_CHECK(source_ != nullptr, "Pipeline needs a dataset");
}

Pipeline::Pipeline(const Pipeline& o)
    : source_(o.source_), sampler_(o.sampler_), column_transforms_(o.column_transforms_), seed_(o.seed_), skip_(o.skip_), take_(o.take_),
      batch_size_(o.batch_size_), batched_(o.batched_), drop_remainder_(o.drop_remainder_), repeat_(o.repeat_),
      workers_(o.workers_), prefetch_(o.prefetch_) {}

Pipeline::~Pipeline() { stop_workers(); }

Pipeline& Pipeline::map(std::vector<Transform> transforms, Column column) {
  return map(std::move(transforms), column == Column::Input ? size_t{0} : size_t{1});
}

Pipeline& Pipeline::map(std::vector<Transform> transforms, size_t column) {
  if (column_transforms_.size() <= column) column_transforms_.resize(column + 1);
  auto& list = column_transforms_[column];
  for (auto& t : transforms) {
    KILN_CHECK(static_cast<bool>(t.apply), "Pipeline::map: transform '", t.name, "' has no function");
    list.push_back(std::move(t));
  }
  return *this;
}

Pipeline& Pipeline::shuffle(uint64_t seed) {
  seed_ = seed;
  sampler_ = std::make_shared<RandomSampler>(seed);
  return *this;
}

Pipeline& Pipeline::sampler(std::shared_ptr<const Sampler> sampler) {
  KILN_CHECK(sampler != nullptr, "Pipeline::sampler: null sampler");
  sampler_ = std::move(sampler);
  return *this;
}

Pipeline& Pipeline::seed(uint64_t seed) {
  seed_ = seed;
  return *this;
}

Pipeline& Pipeline::skip(int64_t count) {
  KILN_CHECK(count >= 0, "Pipeline::skip: count must be >= 0, got ", count);
  skip_ = batched_ ? count * batch_size_ : count;
  return *this;
}

Pipeline& Pipeline::take(int64_t count) {
  KILN_CHECK(count >= 0, "Pipeline::take: count must be >= 0, got ", count);
  take_ = batched_ ? count * batch_size_ : count;
  return *this;
}

Pipeline& Pipeline::batch(int64_t size, bool drop_remainder) {
  KILN_CHECK(size > 0, "Pipeline::batch: batch size must be positive, got ", size);
  batch_size_ = size;
  drop_remainder_ = drop_remainder;
  batched_ = true;
  return *this;
}

Pipeline& Pipeline::repeat(int64_t count) {
  KILN_CHECK(count >= 1, "Pipeline::repeat: count must be >= 1, got ", count);
  repeat_ = count;
  return *this;
}

Pipeline& Pipeline::num_parallel_workers(int workers) {
  KILN_CHECK(workers >= 0 && workers <= 256, "Pipeline::num_parallel_workers: need 0 to 256, got ", workers);
  workers_ = workers;
  return *this;
}

Pipeline& Pipeline::prefetch(int batches) {
  KILN_CHECK(batches >= 1, "Pipeline::prefetch: need at least 1 batch, got ", batches);
  prefetch_ = batches;
  return *this;
}

std::vector<int64_t> Pipeline::pass_order(int64_t pass) const {
  std::vector<int64_t> order = sampler_->indices(source_->size(), pass);
  int64_t n = static_cast<int64_t>(order.size());
  int64_t begin = std::min(skip_, n);
  int64_t end = take_ < 0 ? n : std::min(n, begin + take_);
  return {order.begin() + begin, order.begin() + end};
}

int64_t Pipeline::pass_length() const {
  int64_t n = sampler_->count(source_->size());
  int64_t after_skip = std::max<int64_t>(0, n - skip_);
  return take_ < 0 ? after_skip : std::min(after_skip, take_);
}

int64_t Pipeline::samples_per_epoch() const {
  int64_t n = pass_length();
  if (drop_remainder_) n -= n % batch_size_;
  return n * repeat_;
}

int64_t Pipeline::batches_per_epoch() const {
  int64_t n = pass_length();
  return repeat_ * (drop_remainder_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_);
}

Sample Pipeline::load(int64_t index, uint64_t epoch, int64_t position) const {
  Sample s;
  try {
    s = source_->get(index);
  } catch (const std::exception& e) {
    KILN_FAIL("data pipeline: reading dataset index ", index, " failed: ", e.what());
  }
  Generator gen(mix_seed(mix_seed(seed_, epoch), static_cast<uint64_t>(position)));
  auto run = [&](std::vector<Transform> const& list, Tensor& value, const std::string& column) {
    for (const Transform& t : list) {
      try {
        value = t.apply(value, gen);
      } catch (const std::exception& e) {
        KILN_FAIL("data pipeline: transform '", t.name, "' failed on the ", column, " of dataset index ", index, ": ",
                  e.what());
      }
    }
  };
  for (size_t c = 0; c < column_transforms_.size(); ++c) {
    if (column_transforms_[c].empty()) continue;
    KILN_CHECK(c < 2 + s.extra.size(), "data pipeline: transforms map column ", c, " but dataset index ", index,
               " has ", 2 + s.extra.size(), " columns (0 is the input, 1 the label)");
    Tensor& value = c == 0 ? s.input : c == 1 ? s.label : s.extra[c - 2];
    run(column_transforms_[c], value, c == 0 ? "input" : c == 1 ? "label" : "column " + std::to_string(c));
  }
  return s;
}

Sample Pipeline::sample(int64_t position) const {
  std::vector<int64_t> order = pass_order(0);
  KILN_CHECK(position >= 0 && position < static_cast<int64_t>(order.size()), "Pipeline::sample: position ", position,
             " is out of range for ", order.size(), " samples");
  return load(order[static_cast<size_t>(position)], 0, position);
}

Batch Pipeline::make_batch(const Plan& plan, int64_t b) const {
  NoGradGuard no_grad;
  const auto& idx = plan.indices[static_cast<size_t>(b)];
  std::vector<Sample> samples;
  samples.reserve(idx.size());
  for (size_t i = 0; i < idx.size(); ++i)
    samples.push_back(load(idx[i], plan.epoch, plan.first_position[static_cast<size_t>(b)] + static_cast<int64_t>(i)));
  return collate(samples);
}

void Pipeline::stop_workers() {
  if (!running_) return;
  {
    std::lock_guard<std::mutex> lock(running_->mu);
    running_->stop = true;
  }
  running_->consumed.notify_all();
  for (auto& t : running_->threads) t.join();
  running_.reset();
}

void Pipeline::start_epoch() {
  stop_workers();
  ++epoch_;
  auto plan = std::make_shared<Plan>();
  plan->epoch = static_cast<uint64_t>(epoch_);
  int64_t position = 0;
  for (int64_t r = 0; r < repeat_; ++r) {
    std::vector<int64_t> order = pass_order(epoch_ * repeat_ + r);
    int64_t n = static_cast<int64_t>(order.size());
    for (int64_t start = 0; start < n; start += batch_size_) {
      int64_t count = std::min(batch_size_, n - start);
      if (count < batch_size_ && drop_remainder_) break;
      plan->indices.emplace_back(order.begin() + start, order.begin() + start + count);
      plan->first_position.push_back(position);
      position += count;
    }
  }
  plan_ = plan;
  cursor_ = 0;
  if (workers_ == 0 || plan->indices.empty()) return;

  running_ = std::make_unique<Workers>();
  Workers* w = running_.get();
  int64_t total = static_cast<int64_t>(plan->indices.size());
  int64_t ahead = std::max(prefetch_, workers_);
  for (int i = 0; i < workers_; ++i) {
    w->threads.emplace_back([this, w, plan, total, ahead] {
      // The workers are the pipeline's parallelism: an op a transform runs
      // stays on its worker, so they do not add OpenMP teams of their own
      // to the threads the training step uses.
      ThreadLimit one_thread(1);
      for (;;) {
        int64_t b;
        {
          std::unique_lock<std::mutex> lock(w->mu);
          w->consumed.wait(lock, [&] { return w->stop || w->next_to_make >= total || w->next_to_make < w->cursor + ahead; });
          if (w->stop || w->next_to_make >= total) return;
          b = w->next_to_make++;
        }
        Batch batch;
        std::exception_ptr error;
        try {
          batch = make_batch(*plan, b);
        } catch (...) {
          error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> lock(w->mu);
          if (error) w->failed[b] = error;
          else w->ready[b] = std::move(batch);
        }
        w->produced.notify_all();
      }
    });
  }
}

bool Pipeline::next(Batch& batch) {
  if (!plan_) start_epoch();
  if (cursor_ >= static_cast<int64_t>(plan_->indices.size())) return false;
  if (!running_) {
    batch = make_batch(*plan_, cursor_++);
    return true;
  }
  std::exception_ptr error;
  {
    Workers* w = running_.get();
    std::unique_lock<std::mutex> lock(w->mu);
    w->produced.wait(lock, [&] { return w->ready.count(cursor_) || w->failed.count(cursor_); });
    if (auto it = w->failed.find(cursor_); it != w->failed.end()) {
      error = it->second;
    } else {
      auto it2 = w->ready.find(cursor_);
      batch = std::move(it2->second);
      w->ready.erase(it2);
      w->cursor = ++cursor_;
    }
  }
  if (error) {
    stop_workers();
    std::rethrow_exception(error);
  }
  running_->consumed.notify_all();
  return true;
}

}  // namespace kiln::data

#include "serve/served_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/allocator.h"
#include "kiln/backend.h"
#include "kiln/functional.h"

namespace kiln::serve {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

SessionOptions session_options(const ModelConfig& config) {
  SessionOptions o;
  if (!config.device.empty()) o.device = config.device;
  return o;
}

// A host copy of an output's rows for the answer (the server encodes from host memory).
Tensor rows_on_host(const Tensor& y, int64_t from, int64_t to) {
  const Tensor rows = y.slice(0, from, to);
  return y.device() == cpu_device() ? rows.clone() : rows.contiguous().to(cpu_device());
}

}  // namespace

ServedModel::ServedModel(std::string name, std::string version, const std::string& onnx_path, ModelConfig config,
                         ModelMetrics& metrics)
    : name_(std::move(name)),
      version_(std::move(version)),
      config_(std::move(config)),
      metrics_(metrics),
      session_(onnx_path, session_options(config_)) {
  // The config, where it describes tensors, must agree with the file.
  auto check_specs = [&](const std::vector<TensorSpec>& specs, const std::vector<TensorInfo>& infos, const char* kind) {
    for (const auto& spec : specs) {
      auto it = std::find_if(infos.begin(), infos.end(), [&](const TensorInfo& i) { return i.name == spec.name; });
      KILN_CHECK(it != infos.end(), "model '", name_, "': config.yaml names ", kind, " '", spec.name,
                 "', which the ONNX file does not have");
      KILN_CHECK(spec.datatype.empty() || dtype_of_oip(spec.datatype) == it->dtype, "model '", name_, "': config.yaml says ",
                 kind, " '", spec.name, "' is ", spec.datatype, ", the file says ", oip_datatype(it->dtype));
      if (spec.shape.empty() || !it->shape_known) continue;
      // With batching, config shapes are per sample: the file's shape without its batch axis.
      const bool batched = config_.max_batch_size > 0 && !it->shape.empty();
      Shape file(it->shape.begin() + (batched ? 1 : 0), it->shape.end());
      bool same = file.size() == spec.shape.size();
      for (size_t d = 0; same && d < file.size(); ++d) same = file[d] < 0 || spec.shape[d] < 0 || file[d] == spec.shape[d];
      KILN_CHECK(same, "model '", name_, "': config.yaml says ", kind, " '", spec.name, "' has shape ",
                 shape_str(spec.shape), batched ? " per sample" : "", ", the file says ", it->str(),
                 batched ? " (the shape in config.yaml leaves out the batch axis when max_batch_size > 0)" : "",
                 "; correct config.yaml or export the model again");
    }
  };
  check_specs(config_.inputs, inputs(), "input");
  check_specs(config_.outputs, outputs(), "output");
  if (config_.max_batch_size == 0 && config_.batch_buckets_up_to > 0) {
    bool dynamic = !inputs().empty();
    for (const auto* list : {&inputs(), &outputs()})
      for (const auto& info : *list)
        dynamic = dynamic && ((list == &outputs() && !info.shape_known) || (!info.shape.empty() && info.shape[0] < 0));
    if (dynamic) config_.max_batch_size = config_.batch_buckets_up_to;
  }
  // Batching splits and pads along axis 0 of every input and output.
  if (config_.max_batch_size > 0)
    for (const auto* list : {&inputs(), &outputs()})
      for (const auto& info : *list)
        KILN_CHECK((list == &outputs() && !info.shape_known) || (!info.shape.empty() && info.shape[0] < 0), "model '", name_,
                   "': max_batch_size is ", config_.max_batch_size, " but '", info.name,
                   "' has no dynamic batch axis (", info.str(),
                   "); export with kiln export --dynamic-batch, or set max_batch_size: 0");
  batching_ = config_.dynamic_batching && config_.max_batch_size > 1;
  if (batching_)
    for (int i = 0; i < config_.instance_count; ++i) workers_.emplace_back([this] { batch_loop(); });
}

std::shared_ptr<ServedModel> ServedModel::load(std::string name, std::string version, const std::string& onnx_path,
                                               ModelConfig config, ModelMetrics& metrics) {
  static std::mutex loading;  // what a load holds is measured with no other load beside it
  std::lock_guard<std::mutex> lock(loading);
  const Device device = parse_device(session_options(config).device);
  const int64_t before = allocator_stats(device).bytes_in_use;
  auto m = std::make_shared<ServedModel>(std::move(name), std::move(version), onnx_path, std::move(config), metrics);
  m->warm_up();
  const int64_t held = std::max<int64_t>(allocator_stats(device).bytes_in_use - before, 0);
  metrics.device_bytes = held;
  const double budget = m->config_.memory_budget_mb;
  KILN_CHECK(budget <= 0 || held <= budget * (1 << 20), "model '", m->name_, "' holds ",
             std::round(held / double(1 << 20) * 10) / 10, " MiB on ", device.str(),
             " once loaded and warmed up, over its memory_budget_mb of ", budget,
             "; raise memory_budget_mb in its config.yaml, or make it hold less: a smaller max_batch_size (the largest "
             "batch's buffers), fewer warmup sizes");
  return m;
}

ServedModel::~ServedModel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  ready_cv_.notify_all();
  slot_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

std::string ServedModel::expected(const TensorInfo& info) const {
  std::string s = std::string(oip_datatype(info.dtype)) + " [";
  for (size_t i = 0; i < info.shape.size(); ++i) {
    if (i) s += ", ";
    s += info.shape[i] >= 0 ? std::to_string(info.shape[i]) : info.dim_names[i];
  }
  s += "]";
  if (config_.max_batch_size > 0) s += " (batch 1 to " + std::to_string(config_.max_batch_size) + ")";
  return s;
}

// inf and NaN are refused unless the config allows them: most models were
// never meant to see them, and a client that sends them has usually made a
// mistake worth hearing about.
void ServedModel::refuse_non_finite(const std::string& input, const Tensor& t) const {
  int64_t at = first_non_finite(t);
  if (at < 0) return;
  double v = t.contiguous().reshape({-1}).select(0, at).item<double>();
  throw BadRequest("input '" + input + "' holds " + (std::isnan(v) ? "NaN" : "inf") + " at " + position_of(at, t.shape()) +
                   "; model '" + name_ + "' takes finite values only (allow_non_finite: true in its config.yaml runs them)");
}

std::vector<Tensor> ServedModel::order_and_check(const std::vector<std::pair<std::string, Tensor>>& given) const {
  std::vector<Tensor> ordered(inputs().size());
  for (const auto& item : given) {
    const std::string& name = item.first;
    const Tensor& t = item.second;
    auto it = std::find_if(inputs().begin(), inputs().end(), [&](const TensorInfo& i) { return i.name == name; });
    if (it == inputs().end()) {
      std::string names;
      for (const auto& i : inputs()) names += (names.empty() ? "" : ", ") + i.name;
      throw BadRequest("model '" + name_ + "' has no input '" + name + "'; its inputs are: " + names);
    }
    size_t k = static_cast<size_t>(it - inputs().begin());
    if (ordered[k].defined()) throw BadRequest("input '" + name + "' is given twice");
    bool fits = t.dtype() == it->dtype;
    if (it->shape_known) {
      fits = fits && t.dim() == static_cast<int64_t>(it->shape.size());
      for (size_t d = 0; fits && d < it->shape.size(); ++d) fits = it->shape[d] < 0 || it->shape[d] == t.shape()[d];
    }
    if (fits && config_.max_batch_size > 0 && t.dim() > 0)
      fits = t.shape()[0] >= 1 && t.shape()[0] <= config_.max_batch_size;
    if (!fits)
      throw BadRequest("input '" + name + "': expected " + expected(*it) + ", got " + oip_datatype(t.dtype()) + " " +
                       shape_str(t.shape()));
    if (!config_.allow_non_finite) refuse_non_finite(name, t);
    ordered[k] = t;
  }
  for (size_t k = 0; k < ordered.size(); ++k)
    if (!ordered[k].defined())
      throw BadRequest("input '" + inputs()[k].name + "' is missing; expected " + expected(inputs()[k]));
  if (config_.max_batch_size > 0)
    for (const Tensor& t : ordered)
      if (t.shape()[0] != ordered[0].shape()[0])
        throw BadRequest("the inputs disagree on the batch size (axis 0): " + shape_str(ordered[0].shape()) + " and " +
                         shape_str(t.shape()));
  return ordered;
}

// Batches are padded to a power of two (or max_batch_size): each batch size
// is a graph compiled for that shape, and a handful of buckets keeps them all
// compiled and cached instead of compiling for every size that arrives.
int64_t ServedModel::bucket(int64_t batch) const {
  if (config_.max_batch_size <= 0) return batch;
  int64_t b = 1;
  while (b < batch) b *= 2;
  return std::min(b, config_.max_batch_size);
}

std::vector<std::vector<Tensor>> ServedModel::run_rows(const std::vector<const std::vector<Tensor>*>& requests) {
  if (!config_.batch_invariant) return run_padded(requests);
  std::vector<std::vector<Tensor>> results;
  for (const auto* request : requests) {
    std::vector<std::vector<Tensor>> rows;  // per output, its rows
    for (int64_t r = 0; r < (*request)[0].shape()[0]; ++r) {
      std::vector<Tensor> one;
      for (const Tensor& t : *request) one.push_back(t.slice(0, r, r + 1));
      auto out = std::move(run_padded({&one})[0]);
      rows.resize(out.size());
      for (size_t o = 0; o < out.size(); ++o) rows[o].push_back(std::move(out[o]));
    }
    std::vector<Tensor> joined;
    for (auto& parts : rows) joined.push_back(parts.size() == 1 ? parts[0] : concat(parts, 0));
    results.push_back(std::move(joined));
  }
  return results;
}

std::vector<std::vector<Tensor>> ServedModel::run_padded(const std::vector<const std::vector<Tensor>*>& requests) {
  const std::vector<Tensor>& first = *requests[0];
  int64_t rows = 0;
  for (const auto* r : requests) rows += (*r)[0].shape()[0];
  const int64_t padded = bucket(rows);
  std::vector<Shape> shapes;
  for (const Tensor& t : first) {
    shapes.push_back(t.shape());
    shapes.back()[0] = padded;
  }
  // A slot on a device: the rows are gathered in pinned host memory and copied there at once.
  auto fill = [&](size_t i, Tensor& slot) {
    const bool staged = !(slot.device() == cpu_device());
    Tensor host = staged ? Tensor::empty_pinned(slot.shape(), slot.dtype(), slot.device()) : slot;
    auto* at = static_cast<char*>(host.raw_data());
    for (const auto* r : requests) {
      const Tensor part = (*r)[i].contiguous();
      const size_t bytes = static_cast<size_t>(part.numel()) * part.element_size();
      std::memcpy(at, part.raw_data(), bytes);
      at += bytes;
    }
    std::memset(at, 0, static_cast<char*>(host.raw_data()) + host.numel() * host.element_size() - at);  // the padding
    if (staged)  // slots are dense
      copy_between(slot.device(), slot.device_data(), cpu_device(), host.raw_data(),
                   host.numel() * host.element_size());
  };
  std::vector<std::vector<Tensor>> results(requests.size());
  auto read = [&](const std::vector<Tensor>& outputs) {
    int64_t offset = 0;
    for (size_t k = 0; k < requests.size(); ++k) {
      const int64_t n = (*requests[k])[0].shape()[0];
      for (const Tensor& y : outputs) results[k].push_back(rows_on_host(y, offset, offset + n));
      offset += n;
    }
  };
  session_.run_in_place(shapes, fill, read);
  return results;
}

void ServedModel::warm_up() {
  std::vector<int64_t> sizes = config_.warmup_batch_sizes;
  if (batching_ && !sizes.empty())  // every bucket a batch can land in
    for (int64_t b = 1;; b *= 2) {
      sizes.push_back(bucket(b));
      if (bucket(b) >= config_.max_batch_size) break;
    }
  for (int64_t& b : sizes) b = bucket(b);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  for (int64_t b : sizes) {
    std::vector<Tensor> in;
    for (const auto& info : inputs()) {
      KILN_CHECK(info.shape_known, "model '", name_, "': cannot warm up input '", info.name, "' of unknown shape");
      Shape s(info.shape.begin(), info.shape.end());
      for (size_t d = 0; d < s.size(); ++d) {
        KILN_CHECK(s[d] >= 0 || d == 0, "model '", name_, "': cannot warm up input '", info.name,
                   "': axis ", d, " has no fixed size");
        if (s[d] < 0) s[d] = b;
      }
      in.push_back(zeros(s, info.dtype));
    }
    session_.run(in);
  }
}

std::string ServedModel::timed_out() const {
  return "model '" + name_ + "': the request waited longer than its timeout (kiln serve --request-timeout) and was "
         "not run; retry later";
}

std::vector<Tensor> ServedModel::run_in_chunks(const std::vector<Tensor>& inputs,
                                               std::chrono::steady_clock::time_point deadline) {
  const int64_t rows = inputs[0].shape()[0];
  if (rows <= kMaxRowsPerRun) return std::move(run_rows({&inputs})[0]);
  std::vector<std::vector<Tensor>> parts;  // per chunk, its outputs
  for (int64_t start = 0; start < rows; start += kMaxRowsPerRun) {
    if (start > 0 && std::chrono::steady_clock::now() >= deadline)
      throw Unavailable("model '" + name_ + "': the request ran past its timeout (kiln serve --request-timeout) after " +
                        std::to_string(start) + " of its " + std::to_string(rows) +
                        " rows; send fewer rows at once or raise the timeout");
    std::vector<Tensor> chunk;
    for (const Tensor& t : inputs) chunk.push_back(t.slice(0, start, std::min(rows, start + kMaxRowsPerRun)));
    parts.push_back(std::move(run_rows({&chunk})[0]));
  }
  std::vector<Tensor> out;
  for (size_t o = 0; o < parts[0].size(); ++o) {
    std::vector<Tensor> pieces;
    for (auto& p : parts) pieces.push_back(std::move(p[o]));
    out.push_back(concat(pieces, 0));
  }
  return out;
}

std::vector<Tensor> ServedModel::run_now(const std::vector<Tensor>& inputs,
                                         std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!slot_cv_.wait_until(lock, deadline, [&] { return running_ < config_.instance_count || stopping_; }))
      throw Unavailable(timed_out());
    if (stopping_) throw Unavailable("model '" + name_ + "' is shutting down");
    ++running_;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<Tensor> out;
  try {
    out = config_.max_batch_size > 0 ? run_in_chunks(inputs, deadline) : session_.run(inputs);
    for (Tensor& t : out)
      if (!(t.device() == cpu_device())) t = t.to(cpu_device());
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
    slot_cv_.notify_one();
    throw;
  }
  metrics_.compute_seconds.observe(seconds_since(t0));
  metrics_.batch_size.observe(inputs.empty() || inputs[0].dim() == 0 ? 1.0 : static_cast<double>(inputs[0].shape()[0]));
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  slot_cv_.notify_one();
  return out;
}

std::vector<Tensor> ServedModel::infer(const std::vector<std::pair<std::string, Tensor>>& given,
                                       std::chrono::steady_clock::time_point deadline) {
  std::vector<Tensor> ordered = order_and_check(given);
  if (std::chrono::steady_clock::now() >= deadline) throw Unavailable(timed_out());  // decoding took it all
  if (!batching_) return run_now(ordered, deadline);
  auto p = std::make_shared<Pending>();
  p->inputs = std::move(ordered);
  p->batch = p->inputs[0].shape()[0];
  p->queued = std::chrono::steady_clock::now();
  p->deadline = deadline;
  auto result = p->result.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw Unavailable("model '" + name_ + "' is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_size)
      throw Unavailable("model '" + name_ + "': the queue is full (" + std::to_string(config_.max_queue_size) +
                        " requests waiting); retry later");
    queue_.push_back(p);
    metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  ready_cv_.notify_one();
  if (result.wait_until(deadline) != std::future_status::ready) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), p);
    if (it != queue_.end()) {  // still queued: withdraw it
      queue_.erase(it);
      metrics_.queue_depth = static_cast<int64_t>(queue_.size());
      throw Unavailable(timed_out());
    }
  }
  return result.get();  // being computed: its batch finishes soon
}

void ServedModel::batch_loop() {
  using clock = std::chrono::steady_clock;
  const auto delay = std::chrono::microseconds(config_.max_queue_delay_us);
  auto preferred = [&](int64_t n) {
    return std::find(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end(), n) !=
           config_.preferred_batch_sizes.end();
  };
  for (;;) {
    std::vector<std::shared_ptr<Pending>> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ready_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) return;
      const clock::time_point deadline = queue_.front()->queued + delay;
      int64_t total = 0;
      for (;;) {
        while (!queue_.empty() && total + queue_.front()->batch <= config_.max_batch_size) {
          if (clock::now() >= queue_.front()->deadline) {  // past its deadline: answered, not run
            queue_.front()->result.set_exception(std::make_exception_ptr(Unavailable(timed_out())));
            queue_.pop_front();
            continue;
          }
          total += queue_.front()->batch;
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
        bool full = total >= config_.max_batch_size || preferred(total) ||
                    (!queue_.empty() && total + queue_.front()->batch > config_.max_batch_size);
        if (full || stopping_ || clock::now() >= deadline) break;
        ready_cv_.wait_until(lock, deadline);
      }
      metrics_.queue_depth = static_cast<int64_t>(queue_.size());
      if (!queue_.empty()) ready_cv_.notify_one();  // another worker can start the next batch
    }
    run_batch(batch);
  }
}

void ServedModel::run_batch(std::vector<std::shared_ptr<Pending>>& batch) {
  auto start = std::chrono::steady_clock::now();
  for (auto& p : batch) metrics_.queue_seconds.observe(std::chrono::duration<double>(start - p->queued).count());
  try {
    std::vector<const std::vector<Tensor>*> requests;
    int64_t rows = 0;
    for (auto& p : batch) {
      requests.push_back(&p->inputs);
      rows += p->batch;
    }
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<Tensor>> out = run_rows(requests);
    metrics_.compute_seconds.observe(seconds_since(t0));
    metrics_.batch_size.observe(static_cast<double>(rows));
    for (size_t k = 0; k < batch.size(); ++k) batch[k]->result.set_value(std::move(out[k]));
  } catch (...) {
    for (auto& p : batch) p->result.set_exception(std::current_exception());
  }
}

}  // namespace kiln::serve

#include "kiln/training_checkpoint.h"

#include <cstdio>
#include <sstream>

#include "kiln/io.h"

namespace kiln::train {
namespace {
constexpr const char* kFormat = "kiln-training-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer/";

int64_t to_int(const std::map<std::string, std::string>& meta, const std::string& key, const std::string& path) {
  auto it = meta.find(key);
  KILN_CHECK(it != meta.end(), "'", path, "' is not a complete training checkpoint: no '", key, "' in its metadata");
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    KILN_FAIL("'", path, "': metadata '", key, "' is not a number ('", it->second, "')");
  }
}
std::string callback_key(size_t i, const std::string& key) {
  std::string k = "callback";
  k += std::to_string(i);
  k += ".";
  k += key;
  return k;
}
}  // namespace

void save_training_checkpoint(const std::string& path, Model& model, const ResumePoint& at,
                              const std::map<std::string, std::string>& metadata,
                              const std::vector<std::shared_ptr<Callback>>& callbacks) {
  io::NamedTensors tensors = model.network().parameters_and_names();
  for (auto& b : model.network().buffers_and_names()) tensors.push_back(b);
  for (auto& [name, t] : model.optimizer().state()) tensors.emplace_back(kOptimizerPrefix + name, t);
  std::map<std::string, std::string> meta = metadata;
  meta["kiln.format"] = kFormat;
  meta["step"] = std::to_string(at.step);
  meta["epoch"] = std::to_string(at.epoch);
  meta["batches_done"] = std::to_string(at.batches_done);
  meta["optimizer"] = model.optimizer().name();
  meta["rng"] = "philox " + std::to_string(default_generator().initial_seed()) + " " +
                std::to_string(default_generator().offset());
  const auto& groups = model.optimizer().groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    std::ostringstream lr;
    lr.precision(17);
    lr << groups[g].lr;
    meta["lr.g" + std::to_string(g)] = lr.str();
  }
  for (size_t i = 0; i < callbacks.size(); ++i)
    for (auto& [k, v] : callbacks[i]->state()) meta[callback_key(i, k)] = v;
  if (const LossScaler* scaler = model.loss_scaler()) meta.merge(scaler->state());
  io::save_safetensors(path, tensors, meta);
}

std::map<std::string, std::string> load_training_checkpoint(const std::string& path, Model& model,
                                                            const std::vector<std::shared_ptr<Callback>>& callbacks) {
  io::MappedSafetensors file(path);
  const auto& meta = file.metadata();
  auto format = meta.find("kiln.format");
  KILN_CHECK(format != meta.end() && format->second == kFormat, "'", path,
             "' is not a Kiln training checkpoint (it holds weights only?); resume needs the file kiln train writes as "
             "resume.safetensors");
  ResumePoint at{to_int(meta, "step", path), static_cast<int>(to_int(meta, "epoch", path)),
                 to_int(meta, "batches_done", path)};
  auto written_by = meta.find("optimizer");
  KILN_CHECK(written_by == meta.end() || written_by->second == model.optimizer().name(), "'", path,
             "' was written by training with ", written_by->second, ", but this run uses ", model.optimizer().name(),
             ": its optimizer state cannot continue. Resume with the same optimizer (kiln train --resume reads it "
             "from the recipe stored in the checkpoint), or start a new run from its weights");
  std::vector<std::pair<std::string, Tensor>> state;
  std::string prefix = kOptimizerPrefix;
  for (const auto& e : file.entries())
    if (e.name.rfind(prefix, 0) == 0) state.emplace_back(e.name.substr(prefix.size()), file.tensor(e));
  io::load_checkpoint(model.network(), file, {.strict = true});  // the mapping already checked
  model.optimizer().load_state(state);
  auto& groups = model.optimizer().groups();
  for (size_t g = 0; g < groups.size(); ++g)
    groups[g].lr = std::stod(meta.count("lr.g" + std::to_string(g)) ? meta.at("lr.g" + std::to_string(g)) : "0");
  std::istringstream rng(meta.count("rng") ? meta.at("rng") : "");
  std::string kind;
  uint64_t seed = 0, offset = 0;
  rng >> kind >> seed >> offset;
  if (kind == "philox") {
    KILN_CHECK(!rng.fail(), "'", path, "': the generator state in its metadata is damaged");
    default_generator().set_state(seed, offset);
  } else {  // written by a Kiln before the counter-based generator
    std::fprintf(stderr, "kiln: warning: '%s' holds a generator state of an older Kiln; random numbers (dropout, "
                 "shuffles) go on from the recipe's seed instead of where the run left them\n", path.c_str());
  }
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::map<std::string, std::string> state;
    std::string prefix = callback_key(i, "");
    for (auto& [k, v] : meta)
      if (k.rfind(prefix, 0) == 0) state[k.substr(prefix.size())] = v;
    callbacks[i]->load_state(state);
  }
  if (LossScaler* scaler = model.loss_scaler()) scaler->load_state(meta);  // float16 goes on at its scale
  model.resume_at(at.step, at.epoch, at.batches_done);
  return meta;
}

void TrainingCheckpoint::on_step_end(Model& m, const StepInfo& s) {
  last_batch_ = s.batch;
  if (!m.writes_files()) return;  // rank 0 of a data-parallel job writes for all
  if (every_steps_ > 0 && s.step % every_steps_ == 0)
    save_training_checkpoint(path_, m, {s.step, s.epoch, s.batch}, metadata_, stateful_);
}

void TrainingCheckpoint::on_epoch_end(Model& m, const EpochInfo& e) {
  if (!m.writes_files()) return;
  save_training_checkpoint(path_, m, {m.global_step(), e.epoch, last_batch_}, metadata_, stateful_);
}

}  // namespace kiln::train

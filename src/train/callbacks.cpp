#include "kiln/callbacks.h"

#include <filesystem>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>

#include "kiln/io.h"
#include "kiln/profiler.h"

namespace kiln::train {

double monitored_value(const EpochInfo& e, const std::string& monitor) {
  double v;
  if (monitor == "loss") v = e.mean_loss;
  else if (monitor == "val_loss") v = e.val_loss;
  else if (monitor == "val_accuracy") v = e.val_accuracy;
  else KILN_FAIL("unknown monitor '", monitor, "'; use loss, val_loss or val_accuracy");
  KILN_CHECK(!std::isnan(v), "monitor '", monitor, "' has no value: pass a validation set to Model::train");
  return v;
}

namespace {
void check_monitor(const std::string& monitor) {
  KILN_CHECK(monitor == "loss" || monitor == "val_loss" || monitor == "val_accuracy", "unknown monitor '", monitor,
             "'; use loss, val_loss or val_accuracy");
}
bool improved(double v, double best, double min_delta, bool higher_is_better) {
  return higher_is_better ? v > best + min_delta : v < best - min_delta;
}
}  // namespace

void TimeMonitor::on_epoch_end(Model&, const EpochInfo& e) {
  std::printf("epoch %d took %.2f s, %.2f ms per step\n", e.epoch, e.seconds,
              steps_ > 0 ? 1000.0 * e.seconds / static_cast<double>(steps_) : 0.0);
  std::fflush(stdout);
}

ModelCheckpoint::ModelCheckpoint(std::string dir, int every_epochs, int keep_last, std::string prefix,
                                 int64_t every_steps)
    : dir_(std::move(dir)), prefix_(std::move(prefix)), every_(every_epochs), keep_(keep_last),
      every_steps_(every_steps) {
  KILN_CHECK(every_epochs >= 0 && every_steps >= 0 && keep_last > 0 && (every_epochs > 0 || every_steps > 0),
             "ModelCheckpoint: keep_last must be positive and every_epochs or every_steps too (0 turns one off)");
  std::filesystem::create_directories(dir_);
}

void ModelCheckpoint::on_step_end(Model& m, const StepInfo& s) {
  if (every_steps_ > 0 && s.step % every_steps_ == 0)
    save(m, "-step" + std::to_string(s.step), {{"step", std::to_string(s.step)}, {"epoch", std::to_string(s.epoch)}});
}

void ModelCheckpoint::on_epoch_end(Model& m, const EpochInfo& e) {
  if (every_ > 0 && e.epoch % every_ == 0)
    save(m, "-epoch" + std::to_string(e.epoch),
         {{"epoch", std::to_string(e.epoch)}, {"train_loss", std::to_string(e.mean_loss)}});
}

void ModelCheckpoint::save(Model& m, const std::string& tag, std::vector<std::pair<std::string, std::string>> metadata) {
  if (!m.writes_files()) return;  // rank 0 of a data-parallel job writes for all
  std::string path = dir_;
  path += "/";
  path += prefix_;
  path += tag;
  path += ".safetensors";
  io::save_cell(m.network(), path, {metadata.begin(), metadata.end()});
  kept_.push_back(path);
  while (static_cast<int>(kept_.size()) > keep_) {
    std::filesystem::remove(kept_.front());
    kept_.pop_front();
  }
}

EarlyStopping::EarlyStopping(std::string monitor, int patience, double min_delta)
    : monitor_(std::move(monitor)), patience_(patience), min_delta_(min_delta) {
  check_monitor(monitor_);
  higher_is_better_ = monitor_ == "val_accuracy";
  best_ = higher_is_better_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

void EarlyStopping::on_epoch_end(Model& m, const EpochInfo& e) {
  double v = monitored_value(e, monitor_);
  if (improved(v, best_, min_delta_, higher_is_better_)) {
    best_ = v;
    wait_ = 0;
  } else if (++wait_ >= patience_) {
    stopped_epoch_ = e.epoch;
    std::printf("early stopping at epoch %d: %s has not improved for %d epochs (best %.4f)\n", e.epoch, monitor_.c_str(),
                patience_, best_);
    m.stop_training();
  }
}

ReduceLROnPlateau::ReduceLROnPlateau(std::string monitor, double factor, int patience, double min_lr)
    : monitor_(std::move(monitor)), factor_(factor), min_lr_(min_lr), patience_(patience) {
  check_monitor(monitor_);
  KILN_CHECK(factor > 0 && factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got ", factor);
  higher_is_better_ = monitor_ == "val_accuracy";
  best_ = higher_is_better_ ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
}

void ReduceLROnPlateau::on_epoch_end(Model& m, const EpochInfo& e) {
  double v = monitored_value(e, monitor_);
  if (improved(v, best_, 0.0, higher_is_better_)) {
    best_ = v;
    wait_ = 0;
    return;
  }
  if (++wait_ >= patience_) {
    m.optimizer().set_lr(std::max(min_lr_, m.optimizer().lr() * factor_));
    wait_ = 0;
  }
}

namespace {
std::map<std::string, std::string> best_and_wait(double best, int wait) {
  std::ostringstream b;
  b.precision(17);
  b << best;
  return {{"best", b.str()}, {"wait", std::to_string(wait)}};
}
void restore_best_and_wait(const std::map<std::string, std::string>& s, double& best, int& wait) {
  if (s.count("best")) best = std::stod(s.at("best"));
  if (s.count("wait")) wait = std::stoi(s.at("wait"));
}
}  // namespace

std::map<std::string, std::string> EarlyStopping::state() const { return best_and_wait(best_, wait_); }
void EarlyStopping::load_state(const std::map<std::string, std::string>& s) { restore_best_and_wait(s, best_, wait_); }
std::map<std::string, std::string> ReduceLROnPlateau::state() const { return best_and_wait(best_, wait_); }
void ReduceLROnPlateau::load_state(const std::map<std::string, std::string>& s) { restore_best_and_wait(s, best_, wait_); }

ProfilerCallback::ProfilerCallback(std::string dir, int64_t steps, int64_t skip)
    : dir_(std::move(dir)), steps_(steps), skip_(skip) {
  KILN_CHECK(steps > 0 && skip >= 0, "ProfilerCallback: steps must be positive and skip >= 0");
  std::filesystem::create_directories(dir_);
}

void ProfilerCallback::on_train_begin(Model& m) {
  first_step_ = m.global_step() + skip_;
  // Every rank of a data-parallel job profiles its own steps: rank 0 into
  // the folder, the others into rank-K below it.
  if (const auto& dp = m.data_parallel(); dp && dp->group()->rank() > 0 && dir_.find("/rank-") == std::string::npos) {
    dir_ += "/rank-" + std::to_string(dp->group()->place().rank);
    std::filesystem::create_directories(dir_);
  }
}

void ProfilerCallback::on_step_end(Model&, const StepInfo& s) {
  if (!running_ && !done_ && s.step >= first_step_) {
    profiler::start();  // from the next step's wait for data
    running_ = true;
  } else if (running_ && s.step >= first_step_ + steps_) {
    finish();
  }
}

void ProfilerCallback::on_train_end(Model&) {
  if (running_) finish();
}

void ProfilerCallback::finish() {
  profiler::stop();
  running_ = false;
  done_ = true;
  profiler::write_folder(dir_);
}

MetricsLogger::MetricsLogger(const std::string& path, bool append)
    : path_(path), append_(append), json_(path.size() > 6 && path.substr(path.size() - 6) == ".jsonl") {}

void MetricsLogger::on_train_begin(Model& m) {
  if (!m.writes_files() || out_.is_open()) return;
  bool had_lines = append_ && std::filesystem::exists(path_) && std::filesystem::file_size(path_) > 0;
  out_.open(path_, append_ ? std::ios::app : std::ios::trunc);
  KILN_CHECK(out_.good(), "cannot write '", path_, "'");
  if (!json_ && !had_lines) out_ << "epoch,train_loss,val_loss,val_accuracy,seconds,samples_per_s,lr\n";
}

void MetricsLogger::on_epoch_end(Model& m, const EpochInfo& e) {
  if (!out_.is_open()) return;  // not the writing rank
  if (json_) {
    nlohmann::json line{{"epoch", e.epoch}, {"train_loss", e.mean_loss}, {"seconds", e.seconds},
                        {"samples_per_s", e.samples_per_s}, {"lr", m.optimizer().lr()}};
    if (!std::isnan(e.val_loss)) line["val_loss"] = e.val_loss;
    if (!std::isnan(e.val_accuracy)) line["val_accuracy"] = e.val_accuracy;
    out_ << line.dump() << "\n";
  } else {
    auto opt = [](double v) { return std::isnan(v) ? std::string() : std::to_string(v); };
    out_ << e.epoch << "," << e.mean_loss << "," << opt(e.val_loss) << "," << opt(e.val_accuracy) << "," << e.seconds
         << "," << e.samples_per_s << "," << m.optimizer().lr() << "\n";
  }
  out_.flush();
}

}  // namespace kiln::train

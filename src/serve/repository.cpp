#include "serve/repository.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <utility>

namespace kiln::serve {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  KILN_CHECK(f.good(), "cannot read '", p.string(), "'");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs fn on a thread of its own and waits. Loading and warming up a model
// runs OpenMP regions, and libgomp keeps a team for every thread that ever
// started one; with more team threads than cores it stops spinning between
// regions, and then every region of every later request pays a futex wake-up.
// On a thread that ends, the team goes with it.
void on_own_thread(const std::function<void()>& fn) {
  std::exception_ptr failed;
  std::thread([&] {
    try {
      fn();
    } catch (...) {
      failed = std::current_exception();
    }
  }).join();
  if (failed) std::rethrow_exception(failed);
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 18 && s.find_first_not_of("0123456789") == std::string::npos;
}

// What a model's folder holds now: every file's name, size and time. A change
// to any of them (a new version, a replaced model.onnx, an edited
// config.yaml) is a reason to load the model again.
std::string fingerprint(const fs::path& folder) {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    auto size = it->file_size(ec);
    auto time = it->last_write_time(ec).time_since_epoch().count();
    files.push_back(fs::relative(it->path(), folder, ec).string() + " " + std::to_string(size) + " " +
                    std::to_string(time));
  }
  if (ec) return "unreadable: " + ec.message();  // read again next time
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& f : files) all += f + "\n";
  return all;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::vector<std::string> version_list(const std::map<int64_t, std::shared_ptr<ServedModel>>& versions) {
  std::vector<std::string> out;
  for (const auto& [v, m] : versions) out.push_back(std::to_string(v));
  return out;
}

}  // namespace

Repository::Repository(const std::string& single_model, const std::string& folder, Metrics& metrics,
                       int64_t single_model_max_batch, std::string device)
    : metrics_(metrics), folder_(folder), device_(std::move(device)) {
  KILN_CHECK(single_model.empty() != folder.empty(), "serve: give either --model FILE or --model-repository DIR");
  if (!single_model.empty()) {
    KILN_CHECK(fs::is_regular_file(single_model), "serve: --model '", single_model, "' is not a file");
    std::string name = fs::path(single_model).stem().string();
    std::shared_ptr<ServedModel> m;
    try {
      on_own_thread([&] {
        ModelConfig config;
        config.batch_buckets_up_to = single_model_max_batch;
        config.device = device_;
        m = ServedModel::load(name, "1", single_model, config, metrics_.model(name));
      });
    } catch (const Error& e) {
      KILN_FAIL("serve: model '", name, "' (", single_model, ") did not load: ", e.what());
    }
    models_[name].versions[1] = std::move(m);
    return;
  }
  KILN_CHECK(fs::is_directory(folder), "serve: --model-repository '", folder, "' is not a folder");
  for (const auto& [name, dir] : scan()) {
    Entry& e = models_[name];
    e.folder = dir;
    e.fingerprint = fingerprint(dir);
    e.versions = read_versions(name, dir);
  }
  KILN_CHECK(!models_.empty(), "serve: '", folder, "' holds no models; the layout is <model>/<version>/model.onnx");
}

std::map<std::string, std::string> Repository::scan() const {
  std::map<std::string, std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(folder_, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;  // hidden: a copy in progress, an editor's folder
    if (name == "plugins") continue;               // op packages, loaded when the server starts
    // A config.yaml may rename the model; a malformed one is reported when the model loads.
    fs::path config_path = it->path() / "config.yaml";
    if (fs::exists(config_path, ec)) {
      try {
        std::string renamed = parse_model_config(read_text(config_path), config_path.string()).name;
        if (!renamed.empty()) name = renamed;
      } catch (const Error&) {
      }
    }
    auto [at, fresh] = found.emplace(name, it->path().string());
    if (!fresh)
      throw RepositoryError(detail::concat("serve: '", at->second, "' and '", it->path().string(),
                                           "' both hold model '", name, "'; give one of them another name"));
  }
  if (ec) throw RepositoryError(detail::concat("serve: cannot read the model repository '", folder_, "': ", ec.message()));
  return found;
}

std::map<int64_t, std::shared_ptr<ServedModel>> Repository::read_versions(const std::string& name,
                                                                          const std::string& folder) {
  fs::path dir(folder);
  ModelConfig config;
  fs::path config_path = dir / "config.yaml";
  if (fs::exists(config_path)) config = parse_model_config(read_text(config_path), config_path.string());
  if (config.device.empty()) config.device = device_;
  std::map<int64_t, std::shared_ptr<ServedModel>> versions;
  for (const auto& v : fs::directory_iterator(dir)) {
    std::string version = v.path().filename().string();
    if (!v.is_directory() || !all_digits(version)) continue;
    // model.onnx, or model.mindir (MindSpore's export).
    fs::path onnx = v.path() / "model.onnx";
    if (!fs::exists(onnx) && fs::exists(v.path() / "model.mindir")) onnx = v.path() / "model.mindir";
    KILN_CHECK(fs::exists(onnx), "serve: '", v.path().string(), "' has no model.onnx (or model.mindir)");
    int64_t number = std::stoll(version);
    try {
      on_own_thread(
          [&] { versions[number] = ServedModel::load(name, version, onnx.string(), config, metrics_.model(name)); });
    } catch (const Error& e) {
      KILN_FAIL("serve: model '", name, "' version ", number, " (", onnx.string(), ") did not load: ", e.what());
    }
  }
  KILN_CHECK(!versions.empty(), "serve: '", folder, "' holds no version folder (<model>/1/model.onnx)");
  return versions;
}

void Repository::require_folder() const {
  if (folder_.empty())
    throw RepositoryError("the repository endpoints need a model repository: start with --model-repository DIR");
}

std::shared_ptr<ServedModel> Repository::find(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.versions.empty()) return nullptr;
  const auto& versions = it->second.versions;
  if (version.empty()) return versions.rbegin()->second;
  if (!all_digits(version) || (version.size() > 1 && version[0] == '0')) return nullptr;  // "01" is not version 1
  auto v = versions.find(std::stoll(version));
  return v == versions.end() ? nullptr : v->second;
}

std::vector<std::string> Repository::versions(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  return it == models_.end() ? std::vector<std::string>{} : version_list(it->second.versions);
}

std::vector<std::string> Repository::loaded_names() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, e] : models_)
    if (!e.versions.empty()) out.push_back(name);
  return out;
}

std::vector<Repository::IndexEntry> Repository::index() const {
  std::map<std::string, std::string> on_disk;
  if (!folder_.empty()) {
    try {
      on_disk = scan();
    } catch (const RepositoryError&) {
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<IndexEntry> out;
  for (const auto& [name, e] : models_) {
    for (const auto& [v, m] : e.versions) out.push_back({name, std::to_string(v), "READY", ""});
    if (e.versions.empty()) out.push_back({name, "", "UNAVAILABLE", e.reason});
  }
  for (const auto& [name, dir] : on_disk)
    if (!models_.count(name)) out.push_back({name, "", "UNAVAILABLE", "not loaded yet"});
  return out;
}

void Repository::load(const std::string& name) {
  require_folder();
  std::lock_guard<std::mutex> changing(change_mu_);
  auto on_disk = scan();
  auto dir = on_disk.find(name);
  if (dir == on_disk.end()) {
    std::vector<std::string> names;
    for (const auto& [n, d] : on_disk) names.push_back(n);
    throw RepositoryError(detail::concat("no model '", name, "' in the model repository '", folder_, "'",
                                         names.empty() ? "" : " (it holds " + join(names) + ")",
                                         "; a model is a folder <model>/<version>/model.onnx"));
  }
  std::string print = fingerprint(dir->second);
  std::map<int64_t, std::shared_ptr<ServedModel>> fresh;
  try {
    fresh = read_versions(name, dir->second);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& entry = models_[name];
    entry.folder = dir->second;
    entry.fingerprint = print;  // not tried again until its files change
    if (entry.versions.empty()) entry.reason = e.what();
    throw RepositoryError(detail::concat(e.what(), entry.versions.empty() ? "" : "; the loaded versions keep serving"));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& entry = models_[name];
    entry.folder = dir->second;
    entry.fingerprint = print;
    entry.reason.clear();
    std::swap(entry.versions, fresh);
  }
  // The old versions go when their last request finishes (here, if none is running).
}

void Repository::unload(const std::string& name) {
  require_folder();
  std::lock_guard<std::mutex> changing(change_mu_);
  std::map<int64_t, std::shared_ptr<ServedModel>> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = models_.find(name);
    if (it == models_.end() || it->second.versions.empty())
      throw RepositoryError(detail::concat("model '", name, "' is not loaded"));
    std::swap(old, it->second.versions);
    it->second.reason = "unloaded";
  }
}

std::vector<std::string> Repository::poll() {
  if (folder_.empty()) return {};
  std::lock_guard<std::mutex> changing(change_mu_);
  std::vector<std::string> changes;
  std::map<std::string, std::string> on_disk;
  try {
    on_disk = scan();
  } catch (const RepositoryError& e) {
    return {e.what()};
  }
  for (const auto& [name, dir] : on_disk) {
    std::string print = fingerprint(dir);
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = models_.find(name);
      known = it != models_.end();
      if (known && it->second.folder == dir && it->second.fingerprint == print) continue;
    }
    std::map<int64_t, std::shared_ptr<ServedModel>> fresh;
    std::string failure;
    try {
      fresh = read_versions(name, dir);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    Entry& entry = models_[name];
    entry.folder = dir;
    entry.fingerprint = print;
    if (!failure.empty()) {
      if (entry.versions.empty()) entry.reason = failure;
      changes.push_back(failure + (entry.versions.empty() ? "" : "; the loaded versions keep serving"));
      continue;
    }
    changes.push_back(detail::concat("model '", name, "' ", known ? "reloaded" : "loaded", " from ", dir, " (versions ",
                                     join(version_list(fresh)), ")"));
    entry.reason.clear();
    std::swap(entry.versions, fresh);  // the old versions go with `fresh`, or with their last request
  }
  std::vector<std::shared_ptr<ServedModel>> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = models_.begin(); it != models_.end();) {
      if (on_disk.count(it->first)) {
        ++it;
        continue;
      }
      for (auto& [v, m] : it->second.versions) gone.push_back(std::move(m));
      changes.push_back(detail::concat("model '", it->first, "' unloaded: its folder ", it->second.folder, " is gone"));
      it = models_.erase(it);
    }
  }
  return changes;
}

}  // namespace kiln::serve

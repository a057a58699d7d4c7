#include "serve/repository.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

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

}  // namespace

Repository::Repository(const std::string& single_model, const std::string& folder, Metrics& metrics) {
  KILN_CHECK(single_model.empty() != folder.empty(), "serve: give either --model FILE or --model-repository DIR");
  auto load = [&](const std::string& name, int64_t version, const fs::path& onnx, ModelConfig config) {
    try {
      std::unique_ptr<ServedModel> m;
      on_own_thread([&] {
        m = std::make_unique<ServedModel>(name, std::to_string(version), onnx.string(), std::move(config),
                                          metrics.model(name));
        m->warm_up();
      });
      models_[name][version] = std::move(m);
    } catch (const Error& e) {
      KILN_FAIL("serve: model '", name, "' version ", version, " (", onnx.string(), ") did not load: ", e.what());
    }
  };
  if (!single_model.empty()) {
    KILN_CHECK(fs::is_regular_file(single_model), "serve: --model '", single_model, "' is not a file");
    load(fs::path(single_model).stem().string(), 1, single_model, ModelConfig{});
    return;
  }
  KILN_CHECK(fs::is_directory(folder), "serve: --model-repository '", folder, "' is not a folder");
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (!entry.is_directory()) continue;
    std::string name = entry.path().filename().string();
    ModelConfig config;
    fs::path config_path = entry.path() / "config.yaml";
    if (fs::exists(config_path)) config = parse_model_config(read_text(config_path), config_path.string());
    if (!config.name.empty()) name = config.name;
    bool any = false;
    for (const auto& v : fs::directory_iterator(entry.path())) {
      std::string version = v.path().filename().string();
      if (!v.is_directory() || !all_digits(version)) continue;
      fs::path onnx = v.path() / "model.onnx";
      KILN_CHECK(fs::exists(onnx), "serve: '", v.path().string(), "' has no model.onnx");
      load(name, std::stoll(version), onnx, config);
      any = true;
    }
    KILN_CHECK(any, "serve: '", entry.path().string(), "' holds no version folder (<model>/1/model.onnx)");
  }
  KILN_CHECK(!models_.empty(), "serve: '", folder, "' holds no models; the layout is <model>/<version>/model.onnx");
}

ServedModel* Repository::find(const std::string& name, const std::string& version) const {
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) return nullptr;
  if (version.empty()) return it->second.rbegin()->second.get();
  if (!all_digits(version)) return nullptr;
  auto v = it->second.find(std::stoll(version));
  return v == it->second.end() ? nullptr : v->second.get();
}

std::vector<std::string> Repository::versions(const std::string& name) const {
  std::vector<std::string> out;
  auto it = models_.find(name);
  if (it != models_.end())
    for (const auto& [v, m] : it->second) out.push_back(std::to_string(v));
  return out;
}

}  // namespace kiln::serve

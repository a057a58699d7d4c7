#pragma once
// The models a server holds: one ONNX file, or a repository folder of
// <model>/<version>/model.onnx with an optional <model>/config.yaml.
#include <map>
#include <memory>
#include <string>

#include "serve/served_model.h"

namespace kiln::serve {

class Repository {
 public:
  // Loads (and warms up) every model; throws naming the model that failed.
  Repository(const std::string& single_model, const std::string& folder, Metrics& metrics);
  // version "" means the highest one. Null when there is no such model.
  ServedModel* find(const std::string& name, const std::string& version) const;
  std::vector<std::string> versions(const std::string& name) const;
  const std::map<std::string, std::map<int64_t, std::unique_ptr<ServedModel>>>& models() const { return models_; }

 private:
  std::map<std::string, std::map<int64_t, std::unique_ptr<ServedModel>>> models_;
};

}  // namespace kiln::serve

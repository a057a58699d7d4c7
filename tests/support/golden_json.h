#pragma once
// Golden values that the PyTorch scripts in tests/golden write as JSON:
// tensors as {"shape": [...], "data": [...]} in float64, read as float32.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "kiln/kiln.h"

namespace kiln::testing {

inline Tensor golden_tensor(const nlohmann::json& j) {
  return from_vector<double>(j.at("data").get<std::vector<double>>(), j.at("shape").get<Shape>()).to(DType::Float32);
}

// The "cases" of tests/golden/FILE, read once per file.
inline const nlohmann::json& golden_json_cases(const std::string& file) {
  static std::map<std::string, nlohmann::json> docs;
  auto it = docs.find(file);
  if (it == docs.end()) {
    std::ifstream f(std::string(KILN_GOLDEN_DIR) + "/" + file);
    it = docs.emplace(file, nlohmann::json::parse(f)).first;
  }
  return it->second.at("cases");
}

}  // namespace kiln::testing

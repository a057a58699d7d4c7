#pragma once
// ONNX Runtime (the onnxruntime-node package in tools/ort, installed by
// scripts/install-deps.sh) as an independent reference: runs a model file on
// inputs and returns its outputs.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::testing {

inline std::string ort_dir() { return std::string(KILN_SOURCE_DIR) + "/tools/ort"; }
inline bool ort_available() {
  return std::filesystem::exists(ort_dir() + "/node_modules/onnxruntime-node/package.json") &&
         std::system("node --version > /dev/null 2>&1") == 0;
}

inline const char* ort_type(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Bool: return "bool";
    default: return "unsupported";
  }
}
inline DType kiln_type(const std::string& t) {
  for (DType d : {DType::Float32, DType::Float64, DType::Int32, DType::Int64, DType::UInt8, DType::Int8, DType::Bool})
    if (t == ort_type(d)) return d;
  throw std::runtime_error("ONNX Runtime returned an output of type " + t);
}

struct OrtResult {
  std::vector<std::pair<std::string, Tensor>> outputs;
  std::vector<double> latency_ms;  // with bench_runs > 0
};

// Throws with ONNX Runtime's own message when it refuses the model.
inline OrtResult run_ort(const std::string& model, const std::vector<std::pair<std::string, Tensor>>& inputs,
                         int threads = 1, int bench_runs = 0) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln_ort_" + std::to_string(::getpid()) + "_" + std::to_string(std::rand()));
  fs::create_directories(dir);
  nlohmann::json spec;
  spec["inputs"] = nlohmann::json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    Tensor c = inputs[i].second.contiguous();
    std::string file = (dir / ("in" + std::to_string(i) + ".bin")).string();
    std::ofstream(file, std::ios::binary).write(static_cast<const char*>(c.raw_data()), c.numel() * c.element_size());
    spec["inputs"].push_back({{"name", inputs[i].first}, {"type", ort_type(c.dtype())}, {"dims", c.shape()}, {"file", file}});
  }
  std::ofstream(dir / "spec.json") << spec.dump();
  std::string cmd = "node '" + ort_dir() + "/ort_run.js' '" + model + "' '" + (dir / "spec.json").string() + "' '" +
                    (dir / "out").string() + "' --threads " + std::to_string(threads) + " --bench " +
                    std::to_string(bench_runs) + " > '" + (dir / "log.txt").string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::ifstream log(dir / "log.txt");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    fs::remove_all(dir);
    throw std::runtime_error("ONNX Runtime failed: " + text);
  }
  auto report = nlohmann::json::parse(std::ifstream(dir / "out" / "outputs.json"));
  OrtResult result;
  for (auto& o : report["outputs"]) {
    Shape shape = o["dims"].get<Shape>();
    Tensor t = Tensor::empty(shape, kiln_type(o["type"]));
    std::ifstream f(o["file"].get<std::string>(), std::ios::binary);
    f.read(static_cast<char*>(t.raw_data()), t.numel() * t.element_size());
    result.outputs.emplace_back(o["name"], t);
  }
  if (report.contains("latency_ms")) result.latency_ms = report["latency_ms"].get<std::vector<double>>();
  fs::remove_all(dir);
  return result;
}

}  // namespace kiln::testing

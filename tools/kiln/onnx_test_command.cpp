// `kiln onnx-test DIR...`: runs ONNX backend conformance tests (folders with
// model.onnx and test_data_set_N/{input,output}_K.pb) through the runtime.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>

#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"

namespace kiln::cli {
namespace {
namespace fs = std::filesystem;

std::vector<fs::path> find_tests(const std::vector<std::string>& roots) {
  std::vector<fs::path> tests;
  for (const auto& root : roots) {
    KILN_CHECK(fs::is_directory(root), "onnx-test: '", root, "' is not a folder");
    if (fs::exists(fs::path(root) / "model.onnx")) {
      tests.emplace_back(root);
      continue;
    }
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_regular_file() && e.path().filename() == "model.onnx") tests.push_back(e.path().parent_path());
  }
  std::sort(tests.begin(), tests.end());
  return tests;
}

// input_0.pb, input_1.pb, ... in numeric order.
std::vector<Tensor> load_numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<Tensor> tensors;
  for (int k = 0;; ++k) {
    fs::path p = dir / (prefix + std::to_string(k) + ".pb");
    if (!fs::exists(p)) break;
    tensors.push_back(load_tensor_pb(p.string()));
  }
  return tensors;
}

// Empty when equal within ONNX's default tolerances; otherwise what differs.
std::string compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " + dtype_name(want.dtype());
  if (got.shape() != want.shape()) return "shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  auto g = got.to(DType::Float64).contiguous().to_vector<double>();
  auto w = want.to(DType::Float64).contiguous().to_vector<double>();
  bool exact = !is_floating(want.dtype());
  for (size_t i = 0; i < g.size(); ++i) {
    bool ok = exact ? g[i] == w[i]
                    : (std::isnan(w[i]) ? std::isnan(g[i])
                                        : (g[i] == w[i] || std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i])));
    if (!ok) return "element " + std::to_string(i) + " is " + std::to_string(g[i]) + ", expected " + std::to_string(w[i]);
  }
  return "";
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

struct Options {
  std::vector<std::string> dirs;
  int level = 2;
  bool verbose = false;
  std::string filter;
};

int run_tests(const Options& o) {
  auto tests = find_tests(o.dirs);
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> missing_ops, other_reasons;
  for (const auto& dir : tests) {
    std::string name = dir.filename().string();
    if (!o.filter.empty() && name.find(o.filter) == std::string::npos) continue;
    std::string failure;
    try {
      SessionOptions so;
      so.optimization_level = o.level;
      InferenceSession session((dir / "model.onnx").string(), so);
      int sets = 0;
      for (int n = 0; failure.empty(); ++n) {
        fs::path data = dir / ("test_data_set_" + std::to_string(n));
        if (!fs::exists(data)) break;
        ++sets;
        auto inputs = load_numbered(data, "input_");
        auto expected = load_numbered(data, "output_");
        auto outputs = session.run(inputs);
        if (outputs.size() != expected.size()) {
          failure = std::to_string(outputs.size()) + " outputs, expected " + std::to_string(expected.size());
          break;
        }
        for (size_t i = 0; i < outputs.size() && failure.empty(); ++i) {
          std::string diff = compare(outputs[i], expected[i], 1e-3, 1e-7);
          if (!diff.empty()) failure = "data set " + std::to_string(n) + ", output " + std::to_string(i) + ": " + diff;
        }
      }
      if (failure.empty() && sets == 0) failure = "no test_data_set_N folders";
    } catch (const UnsupportedError& e) {
      ++skipped;
      if (!e.missing_ops.empty())
        for (const auto& op : e.missing_ops) ++missing_ops[op];
      else
        ++other_reasons[first_line(e.what()).substr(first_line(e.what()).find(": ") + 2)];
      if (o.verbose) std::cout << "SKIP " << name << ": " << first_line(e.what()) << "\n";
      continue;
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
    if (failure.empty()) {
      ++passed;
      if (o.verbose) std::cout << "PASS " << name << "\n";
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << failure << "\n";
    }
  }
  if (!missing_ops.empty()) {
    std::cout << "skipped for ops Kiln does not have (tests):";
    for (const auto& [op, count] : missing_ops) std::cout << " " << op << " (" << count << ")";
    std::cout << "\n";
  }
  for (const auto& [reason, count] : other_reasons) std::cout << "skipped (" << count << "): " << reason << "\n";
  std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  return failed == 0 ? 0 : 1;
}

}  // namespace

void add_onnx_test_command(CLI::App& app) {
  auto opts = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("onnx-test", "Run ONNX backend conformance tests (model.onnx + test_data_set_N)");
  cmd->add_option("dirs", opts->dirs, "Test folders, or folders that hold them")->required();
  cmd->add_option("--optimization-level", opts->level, "0 eager, 1 compiled, 2 compiled and optimized")->check(CLI::Range(0, 2));
  cmd->add_option("--filter", opts->filter, "Only tests whose name contains this");
  cmd->add_flag("-v,--verbose", opts->verbose, "Print passes and skips too");
  cmd->callback([opts] {
    int rc = run_tests(*opts);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace kiln::cli

#pragma once
// What the serve tests share: a model repository made on the spot, a server
// running in the test's process on a free loopback port, and OIP bodies.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "kiln/serve.h"
#include "support/raw_connection.h"
#include "support/scratch.h"

namespace kiln::testing {

using json = nlohmann::json;

inline const std::string kCnn = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/cnn.onnx";  // dynamic batch
inline const std::string kMlp = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/mlp.onnx";  // fixed batch 2

// A repository with the CNN under the name "cnn", versions 1 and 3, and the given config.
inline std::filesystem::path make_repository(const std::string& config) {
  static int counter = 0;
  std::filesystem::path root = scratch_dir("repo_" + std::to_string(counter++));
  for (const char* v : {"1", "3"}) {
    std::filesystem::create_directories(root / "cnn" / v);
    std::filesystem::copy_file(kCnn, root / "cnn" / v / "model.onnx", std::filesystem::copy_options::overwrite_existing);
  }
  std::ofstream(root / "cnn" / "config.yaml") << config;
  return root;
}

struct Running {
  std::unique_ptr<Server> server;
  int port = 0;
  explicit Running(ServeOptions o) {
    o.port = 0;
    o.host = "127.0.0.1";
    if (o.access_log == "-") o.access_log = "";
    server = std::make_unique<Server>(o);
    port = server->start();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(30, 0);
    return c;
  }
};

inline json infer_body(const Tensor& x) {
  return {{"id", "r1"},
          {"inputs", {{{"name", "input"}, {"shape", x.shape()}, {"datatype", "FP32"}, {"data", x.contiguous().to_vector<float>()}}}}};
}

inline Tensor output_of(const std::string& body) {
  json j = json::parse(body);
  const json& o = j["outputs"][0];
  return from_vector(o["data"].get<std::vector<float>>(), o["shape"].get<Shape>());
}

inline Tensor session_output(const Tensor& x) {
  static InferenceSession session(kCnn);
  return session.run({x})[0];
}

}  // namespace kiln::testing

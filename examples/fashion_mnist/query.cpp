// Asks a running `kiln serve` to classify Fashion-MNIST test images over HTTP
// (Open Inference Protocol v2, JSON tensors) and prints each prediction next
// to its label.
// Usage: fashion_mnist_query HOST PORT MODEL [COUNT [BASE_PATH]]
// BASE_PATH puts the OIP routes under a prefix: a studio service's endpoint,
// /api/v1/services/NAME, with the token in KILN_STUDIO_TOKEN.
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/kiln.h"

using json = nlohmann::json;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s HOST PORT MODEL [COUNT [BASE_PATH]]\n", argv[0]);
    return 2;
  }
  const std::string host = argv[1], model = argv[3];
  const int port = std::atoi(argv[2]);
  const int64_t count = argc > 4 ? std::atoll(argv[4]) : 12;
  const std::string base = argc > 5 ? argv[5] : "";
  httplib::Client client(host, port);
  client.set_read_timeout(30, 0);
  if (const char* token = std::getenv("KILN_STUDIO_TOKEN"); token && !base.empty()) client.set_bearer_token_auth(token);

  // The server answers "live" at once and "ready" once the model is loaded and warmed up.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (;;) {
    auto r = client.Get(base + "/v2/health/ready");
    if (r && r->status == 200) break;
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "the server at %s:%d did not become ready\n", host.c_str(), port);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  kiln::data::TensorDataset test = kiln::data::load_fashion_mnist("test");
  kiln::Tensor images = test.inputs.slice(0, 0, count).contiguous();  // float32 [count, 1, 28, 28] in [0, 1]
  std::vector<int64_t> labels = test.labels.slice(0, 0, count).contiguous().to_vector<int64_t>();
  json request = {{"id", "fashion-mnist-demo"},
                  {"inputs", {{{"name", "input"}, {"shape", images.shape()}, {"datatype", "FP32"},
                               {"data", images.to_vector<float>()}}}}};
  auto t0 = std::chrono::steady_clock::now();
  auto res = client.Post(base + "/v2/models/" + model + "/infer", request.dump(), "application/json");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!res || res->status != 200) {
    std::fprintf(stderr, "infer failed: %s\n", res ? res->body.c_str() : httplib::to_string(res.error()).c_str());
    return 1;
  }
  json reply = json::parse(res->body);
  std::vector<float> logits = reply["outputs"][0]["data"].get<std::vector<float>>();
  const size_t classes = logits.size() / static_cast<size_t>(count);
  int correct = 0;
  std::printf("%-5s %-12s %-12s\n", "image", "predicted", "label");
  for (int64_t i = 0; i < count; ++i) {
    const float* row = logits.data() + i * static_cast<int64_t>(classes);
    size_t best = static_cast<size_t>(std::max_element(row, row + classes) - row);
    correct += static_cast<int64_t>(best) == labels[i];
    const auto& names = kiln::data::kFashionMnistClasses;
    std::printf("%-5lld %-12s %-12s%s\n", static_cast<long long>(i), names[best].c_str(),
                names[static_cast<size_t>(labels[i])].c_str(),
                static_cast<int64_t>(best) == labels[i] ? "" : "  <- wrong");
  }
  std::printf("%d of %lld right; one request of %lld images took %.1f ms (model %s, version %s)\n", correct,
              static_cast<long long>(count), static_cast<long long>(count), ms, model.c_str(),
              reply["model_version"].get<std::string>().c_str());
  return 0;
}

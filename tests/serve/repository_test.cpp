// The model repository while the server runs: the index, load and unload
// endpoints, reloads under load that fail no request, and the poll that
// follows the folder.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/close.h"
#include "support/serve_fixture.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;
using kt::infer_body, kt::kCnn, kt::make_repository, kt::output_of, kt::Running, kt::session_output;

// Copies the CNN in as <name>/<version>/model.onnx the way a deployment
// should: into a hidden folder first, then renamed into place at once.
void add_model(const fs::path& repo, const std::string& name, const std::string& version) {
  fs::path staging = repo / (".staging-" + name);
  fs::create_directories(staging / version);
  fs::copy_file(kCnn, staging / version / "model.onnx", fs::copy_options::overwrite_existing);
  if (fs::exists(repo / name)) {
    fs::rename(staging / version, repo / name / version);
    fs::remove_all(staging);
  } else {
    fs::rename(staging, repo / name);
  }
}

json index_of(const Running& s, const std::string& body = "") {
  auto r = s.client().Post("/v2/repository/index", body, "application/json");
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}

std::string state_of(const json& index, const std::string& name, const std::string& version = "") {
  for (const auto& e : index)
    if (e["name"] == name && (version.empty() || e.value("version", "") == version)) return e["state"];
  return "absent";
}

bool answers(const Running& s, const std::string& model) {
  Tensor x = rand({2, 1, 28, 28});
  auto r = s.client().Post("/v2/models/" + model + "/infer", infer_body(x).dump(), "application/json");
  return r && r->status == 200 && kt::all_close(output_of(r->body), session_output(x), 1e-6, 1e-6);
}

// Polls until cond holds or 20 s pass.
bool eventually(const std::function<bool()>& cond) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return cond();
}

TEST(Repository, IndexLoadAndUnloadFollowTheFolder) {
  fs::path repo = make_repository("max_batch_size: 0\n");
  ServeOptions o;
  o.model_repository = repo.string();
  Running s(o);
  auto c = s.client();
  json index = index_of(s);
  EXPECT_EQ(state_of(index, "cnn", "1"), "READY") << index;
  EXPECT_EQ(state_of(index, "cnn", "3"), "READY") << index;

  // A model added on disk is listed, but served only once loaded.
  add_model(repo, "other", "1");
  EXPECT_EQ(c.Get("/v2/models/other")->status, 404);
  EXPECT_EQ(state_of(index_of(s), "other"), "UNAVAILABLE");
  auto r = c.Post("/v2/repository/models/other/load", "", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(answers(s, "other"));
  EXPECT_EQ(state_of(index_of(s, R"({"ready": true})"), "other", "1"), "READY");

  r = c.Post("/v2/repository/models/other/unload", "", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(c.Get("/v2/models/other")->status, 404);
  index = index_of(s);
  EXPECT_EQ(state_of(index, "other"), "UNAVAILABLE") << index;
  EXPECT_EQ(state_of(index_of(s, R"({"ready": true})"), "other"), "absent");
  r = c.Post("/v2/repository/models/other/unload", "", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("model 'other' is not loaded"), std::string::npos) << r->body;

  // A reload reads the versions on disk again.
  fs::remove_all(repo / "cnn" / "1");
  ASSERT_EQ(c.Post("/v2/repository/models/cnn/load", "", "application/json")->status, 200);
  EXPECT_EQ(json::parse(c.Get("/v2/models/cnn")->body)["versions"], json({"3"}));
  EXPECT_EQ(c.Get("/v2/models/cnn/versions/1")->status, 404);
  EXPECT_TRUE(answers(s, "cnn"));

  // Mistakes get 400 with the reason; what was served stays served.
  r = c.Post("/v2/repository/models/nosuch/load", "", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("no model 'nosuch' in the model repository"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("it holds cnn, other"), std::string::npos) << r->body;
  fs::create_directories(repo / "broken" / "1");
  std::ofstream(repo / "broken" / "1" / "model.onnx") << "not a model";
  r = c.Post("/v2/repository/models/broken/load", "", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("model 'broken' version 1"), std::string::npos) << r->body;
  index = index_of(s);
  EXPECT_EQ(state_of(index, "broken"), "UNAVAILABLE") << index;
  for (const auto& e : index) {
    if (e["name"] == "broken") {
      EXPECT_NE(e.value("reason", "").find("did not load"), std::string::npos) << e;
    }
  }
  std::ofstream(repo / "cnn" / "config.yaml") << "max_batch_size: many\n";
  r = c.Post("/v2/repository/models/cnn/load", "", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("the loaded versions keep serving"), std::string::npos) << r->body;
  EXPECT_TRUE(answers(s, "cnn"));
  EXPECT_EQ(c.Get("/v2/repository/models/cnn/load")->status, 405);
  EXPECT_EQ(c.Post("/v2/repository/index", "[1]", "application/json")->status, 400);
  EXPECT_EQ(c.Post("/v2/repository/models/cnn/reload", "", "application/json")->status, 404);
  fs::remove_all(repo);
}

TEST(Repository, ASingleModelServerHasNoRepositoryToChange) {
  ServeOptions o;
  o.model = kCnn;
  Running s(o);
  auto r = s.client().Post("/v2/repository/models/cnn/unload", "", "application/json");
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("start with --model-repository"), std::string::npos) << r->body;
  EXPECT_EQ(state_of(index_of(s), "cnn", "1"), "READY");
  EXPECT_TRUE(answers(s, "cnn"));
}

// Reloading while clients send requests: every request is answered, rightly.
TEST(Repository, ReloadsUnderLoadFailNoRequest) {
  for (const char* config : {"max_batch_size: 0\n", "max_batch_size: 8\ndynamic_batching: {max_queue_delay_microseconds: 200}\n"}) {
    fs::path repo = make_repository(config);
    ServeOptions o;
    o.model_repository = repo.string();
    Running s(o);
    std::atomic<bool> done{false};
    std::atomic<int> answered{0}, failed{0};
    std::vector<std::thread> clients;
    for (int t = 0; t < 3; ++t)
      clients.emplace_back([&] {
        while (!done) (answers(s, "cnn") ? answered : failed)++;
      });
    for (int i = 0; i < 3; ++i) {
      auto r = s.client().Post("/v2/repository/models/cnn/load", "", "application/json");
      EXPECT_EQ(r->status, 200) << r->body;
    }
    done = true;
    for (auto& t : clients) t.join();
    EXPECT_EQ(failed, 0) << config;
    EXPECT_GT(answered, 0) << config;
    fs::remove_all(repo);
  }
}

TEST(Repository, ThePollLoadsNewAndChangedModelsAndUnloadsRemovedOnes) {
  fs::path repo = make_repository("max_batch_size: 0\n");
  ServeOptions o;
  o.model_repository = repo.string();
  o.repository_poll_s = 0.05;
  Running s(o);
  auto c = s.client();
  add_model(repo, "other", "1");
  EXPECT_TRUE(eventually([&] { return c.Get("/v2/models/other")->status == 200; }));
  EXPECT_TRUE(answers(s, "other"));
  add_model(repo, "cnn", "5");
  EXPECT_TRUE(eventually([&] { return c.Get("/v2/models/cnn/versions/5")->status == 200; }));
  EXPECT_TRUE(answers(s, "cnn"));
  fs::remove_all(repo / "other");
  EXPECT_TRUE(eventually([&] { return c.Get("/v2/models/other")->status == 404; }));
  // A change that does not load leaves the old versions serving, and says why.
  std::ofstream(repo / "cnn" / "config.yaml") << "max_batch_size: many\n";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(answers(s, "cnn"));
  EXPECT_EQ(json::parse(c.Get("/v2/models/cnn")->body)["versions"], json({"1", "3", "5"}));
  fs::remove_all(repo);
}

}  // namespace

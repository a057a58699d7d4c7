// The model registry: versions registered from a finished job (exported
// through its recipe), a store URL or an uploaded file; the signature read
// from the graph; lineage back to the job and its data; a check that the
// model loads and runs before it is READY; aliases; bad input.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/studio.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;
using kiln::testing::text_of;

namespace {

const std::string kCnn = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/cnn.onnx";

struct Api : kiln::testing::StudioApi {
  using StudioApi::StudioApi;
  // Registers and waits for the check; returns the version's final JSON.
  json register_and_wait(const std::string& model, const std::string& body, const std::string& type) {
    auto [status, v] = call("POST", "/api/v1/models/" + model + "/versions", body, type);
    EXPECT_EQ(status, 201) << v.dump();
    if (status != 201) return v;
    EXPECT_EQ(v["state"], "PENDING");
    const std::string at = "/api/v1/models/" + model + "/versions/" + std::to_string(v["version"].get<int64_t>());
    for (int i = 0; i < 300 && v["state"] == "PENDING"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      v = call("GET", at).second;
    }
    return v;
  }
};

}  // namespace

TEST(StudioModels, AJobsModelIsRegisteredWithItsSignatureLineageAndAliases) {
  auto dir = fresh_dir("models_job");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  auto run = [&](const std::string& args) { return s.kiln(token, dir, args); };
  ASSERT_TRUE(s.upload_fashion_mnist(token, dir));
  std::ofstream(dir + "/w1.yaml") << "model: mlp\nmodel_config: {hidden: [64]}\ndataset: fashion_mnist\n"
                                     "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                                     "epochs: 1\nmax_steps: 60\nbatch_size: 64\nseed: 0\n";
  std::ofstream(dir + "/job.yaml") << "name: w1\nrecipe: " << dir << "/w1.yaml\n"
                                      "inputs: {data_url: studio://data/fmnist}\noutput: studio://runs/w1\n";
  auto job = run("job submit " + dir + "/job.yaml --wait");
  ASSERT_EQ(job.first, 0) << job.second << text_of(dir + "/jobs/1/launcher.log");

  auto reg = run("model register fmnist --job 1 --wait --description 'W1, 60 steps' --tag team=vision");
  ASSERT_EQ(reg.first, 0) << reg.second;
  for (const char* line : {"fmnist version 1  READY", "input    input: float32 [batch, 1, 28, 28]",
                           "output   output: float32 [batch, 10]", "job      1", "data     data_url: studio://data/fmnist",
                           "metric   accuracy = ", "tag      team = vision", "about    W1, 60 steps"})
    EXPECT_NE(reg.second.find(line), std::string::npos) << "'" << line << "' missing from:\n" << reg.second;

  // A second version from an uploaded file: the first one's own bytes.
  Api api(s.port, token);
  auto file = api.http.Get("/api/v1/models/fmnist/versions/1/file");
  ASSERT_EQ(file->status, 200);
  std::ofstream(dir + "/v1.onnx", std::ios::binary) << file->body;
  ASSERT_EQ(run("model register fmnist --file " + dir + "/v1.onnx --wait").first, 0);
  auto alias = run("model alias fmnist production 1");
  ASSERT_EQ(alias.first, 0) << alias.second;
  auto shown = run("model show fmnist@production");
  EXPECT_NE(shown.second.find("fmnist version 1  READY  (@production)"), std::string::npos) << shown.second;
  EXPECT_NE(run("model show fmnist").second.find("fmnist version 2  READY"), std::string::npos)
      << "the latest READY version";
  auto listed = run("model list");
  EXPECT_NE(listed.second.find("@production -> 1"), std::string::npos) << listed.second;
  auto resolved = api.call("GET", "/api/v1/models/resolve?uri=models:/fmnist@production").second;
  EXPECT_EQ(resolved["version"], 1);
  EXPECT_EQ(resolved["lineage"]["recipe"].get<std::string>().find("model: mlp"), 0u);
  EXPECT_FALSE(resolved["lineage"]["tracked_metrics"].empty())
      << "the run's tracked metrics: " << api.call("GET", "/api/v1/jobs/1/metrics").second.dump();

  // An aliased version is not deleted; moving the alias frees it.
  auto refused = run("model delete fmnist/1");
  EXPECT_NE(refused.first, 0);
  EXPECT_NE(refused.second.find("aliased as production"), std::string::npos) << refused.second;
  ASSERT_EQ(run("model alias fmnist production 2").first, 0);
  EXPECT_EQ(run("model delete fmnist/1").first, 0);
  EXPECT_EQ(api.call("GET", "/api/v1/models/fmnist").second["versions"].size(), 1u);
}

TEST(StudioModels, AModelThatFailsItsCheckIsFailedWithTheReason) {
  auto dir = fresh_dir("models_failed");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  json bad = api.register_and_wait("broken", "this is not an ONNX file", "application/octet-stream");
  EXPECT_EQ(bad["state"], "FAILED");
  EXPECT_FALSE(bad["reason"].get<std::string>().empty());
  // A graph with an op Kiln does not have: read, then refused naming the op.
  std::string cnn = text_of(kCnn);
  std::string renamed = cnn;
  const std::string relu_type("\x22\x04Relu", 6);  // NodeProto.op_type (field 4), 4 bytes long
  size_t at = renamed.find(relu_type);
  ASSERT_NE(at, std::string::npos);
  renamed.replace(at + 2, 4, "Rel9");
  json unknown = api.register_and_wait("broken", renamed, "application/octet-stream");
  EXPECT_EQ(unknown["state"], "FAILED");
  EXPECT_NE(unknown["reason"].get<std::string>().find("Rel9"), std::string::npos) << unknown.dump();
  auto [status, body] = api.call("PUT", "/api/v1/models/broken/aliases/production", R"({"version": 2})");
  EXPECT_EQ(status, 409) << body.dump();
  EXPECT_NE(body["error"].get<std::string>().find("only a READY version takes an alias"), std::string::npos);
  json good = api.register_and_wait("cnn", cnn, "application/octet-stream");
  EXPECT_EQ(good["state"], "READY") << good.dump();
  EXPECT_EQ(good["signature"]["inputs"][0]["shape"], json({"batch", 1, 28, 28}));
}

TEST(StudioModels, BadRequestsAreRefusedByName) {
  auto dir = fresh_dir("models_bad");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  Api reader(s.port, kiln::testing::create_token(dir, "viewer", studio::Scope::Read));
  auto expect = [](std::pair<int, json> r, int status, const std::string& phrase) {
    EXPECT_EQ(r.first, status) << r.second.dump();
    EXPECT_NE(r.second.dump().find(phrase), std::string::npos) << "'" << phrase << "' missing from " << r.second.dump();
  };
  expect(api.call("POST", "/api/v1/models/Bad Name/versions", R"({"job": 1})"), 400, "not a valid name");
  expect(api.call("POST", "/api/v1/models/m/versions", R"({"job": 42})"), 404, "no job 42");
  expect(api.call("POST", "/api/v1/models/m/versions", R"({"job": 1, "url": "studio://a/b"})"), 400,
         "one of");
  expect(api.call("POST", "/api/v1/models/m/versions", R"({"url": "studio://nobucket/m.onnx"})"), 404, "no bucket 'nobucket'");
  expect(api.call("POST", "/api/v1/models/m/versions", R"({"jobb": 1})"), 400, "unknown field 'jobb'");
  expect(reader.call("POST", "/api/v1/models/m/versions", text_of(kCnn), "application/octet-stream"), 403,
         "needs write");
  json v = api.register_and_wait("m", text_of(kCnn), "application/octet-stream");
  ASSERT_EQ(v["state"], "READY");
  expect(api.call("GET", "/api/v1/models/m/versions/production"), 404, "has no alias 'production' (it has none)");
  expect(api.call("GET", "/api/v1/models/nothing"), 404, "no model 'nothing'");
  expect(api.call("PUT", "/api/v1/models/m/aliases/7", R"({"version": 1})"), 400, "would read as a version");
  // A job that has not completed yet.
  auto job = api.call("POST", "/api/v1/jobs", R"({"name": "slow", "command": ["/bin/sleep", "30"]})");
  ASSERT_EQ(job.first, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  expect(api.call("POST", "/api/v1/models/m/versions", json({{"job", job.second["id"]}}).dump()), 409,
         "a model is registered from a job that has Completed");
  api.call("POST", "/api/v1/jobs/" + job.second["id"].dump() + "/stop");
}

// Run tracking: parameters written once, metrics appended, the RunTracker
// callback sending a real training run's metrics, a studio that cannot be
// reached costing the run nothing, and a job's own token in its environment.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/run_tracker.h"
#include "kiln/kiln.h"
#include "kiln/studio.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;

namespace {

int64_t submit(httplib::Client& c, const std::string& script) {
  json spec = {{"name", "tracked"}, {"command", {"/bin/sh", "-c", script, "job"}}};
  auto r = c.Post("/api/v1/jobs", spec.dump(), "application/json");
  EXPECT_EQ(r->status, 201) << r->body;
  return json::parse(r->body)["id"];
}

json wait_done(httplib::Client& c, int64_t id) {
  json j;
  for (int i = 0; i < 300; ++i) {
    j = json::parse(c.Get("/api/v1/jobs/" + std::to_string(id))->body);
    if (j["state"] == "Completed" || j["state"] == "Failed" || j["state"] == "Terminated") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return j;
}

// A small classifier on random data, trained with the callbacks given.
void train_small(const std::vector<std::shared_ptr<train::Callback>>& callbacks, int epochs = 2) {
  manual_seed(0);
  data::BatchIterator batches({randn({64, 4}), randint(0, 3, {64})}, 16, true);
  auto net = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(4, 3)});
  auto sgd = std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1});
  train::Model model(net, [](const Tensor& o, const Tensor& y) { return cross_entropy(o, y); }, sgd);
  model.train(epochs, batches, callbacks);
}

}  // namespace

TEST(StudioRuns, ParametersAreWrittenOnceAndMetricsAppend) {
  auto dir = fresh_dir("runs_api");
  Studio s(dir);
  httplib::Client c("127.0.0.1", s.port);
  c.set_bearer_token_auth(kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  int64_t id = submit(c, "sleep 0.1");
  const std::string base = "/api/v1/jobs/" + std::to_string(id);
  EXPECT_EQ(c.Post(base + "/params", R"({"params": {"lr": "0.1", "batch": 64}})", "application/json")->status, 204);
  EXPECT_EQ(c.Post(base + "/params", R"({"params": {"lr": "0.1"}})", "application/json")->status, 204);
  auto conflict = c.Post(base + "/params", R"({"params": {"lr": "0.2"}})", "application/json");
  EXPECT_EQ(conflict->status, 409);
  EXPECT_NE(conflict->body.find("written once"), std::string::npos);
  EXPECT_EQ(c.Post(base + "/metrics", R"({"metrics": [{"key": "loss", "step": 2, "value": 0.5},
      {"key": "loss", "step": 1, "value": 0.9}, {"key": "acc", "step": 2, "value": 0.7}]})", "application/json")->status,
            204);
  EXPECT_EQ(c.Post(base + "/metrics", R"({"metrics": [{"key": "loss"}]})", "application/json")->status, 400);
  json m = json::parse(c.Get(base + "/metrics?key=loss")->body)["metrics"];
  ASSERT_EQ(m["loss"].size(), 2u);
  EXPECT_EQ(m["loss"][0][0], 1);  // in step order
  EXPECT_EQ(m["loss"][1][1], 0.5);
  EXPECT_FALSE(m.contains("acc"));
  EXPECT_EQ(json::parse(c.Get(base + "/params")->body)["params"]["batch"], "64");
  EXPECT_EQ(c.Get("/api/v1/jobs/999/metrics")->status, 404);
}

// Tags change at any time (unlike parameters), show on the job, and select jobs.
TEST(StudioRuns, TagsChangeAndSelectJobs) {
  auto dir = fresh_dir("runs_tags");
  Studio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  httplib::Client c("127.0.0.1", s.port);
  c.set_bearer_token_auth(token);
  int64_t first = submit(c, "true"), second = submit(c, "true");
  auto tagged = s.kiln(token, dir, "job tag " + std::to_string(first) + " team=vision stage=try");
  ASSERT_EQ(tagged.first, 0) << tagged.second;
  EXPECT_NE(tagged.second.find("stage = try"), std::string::npos) << tagged.second;
  ASSERT_EQ(s.kiln(token, dir, "job tag " + std::to_string(first) + " stage=final").first, 0);
  ASSERT_EQ(s.kiln(token, dir, "job tag " + std::to_string(second) + " team=nlp").first, 0);
  json job = json::parse(c.Get("/api/v1/jobs/" + std::to_string(first))->body);
  EXPECT_EQ(job["tags"], json({{"stage", "final"}, {"team", "vision"}}));
  auto listed = s.kiln(token, dir, "job list --tag team=vision");
  EXPECT_NE(listed.second.find(std::to_string(first) + "  "), std::string::npos) << listed.second;
  json selected = json::parse(c.Get("/api/v1/jobs?tag=team%3Dvision")->body)["jobs"];
  ASSERT_EQ(selected.size(), 1u) << selected.dump();
  EXPECT_EQ(selected[0]["id"], first);
  ASSERT_EQ(s.kiln(token, dir, "job tag " + std::to_string(first) + " --remove stage").first, 0);
  EXPECT_EQ(json::parse(c.Get("/api/v1/jobs/" + std::to_string(first) + "/tags")->body)["tags"],
            json({{"team", "vision"}}));
  auto bad = s.kiln(token, dir, "job tag " + std::to_string(first) + " novalue");
  EXPECT_NE(bad.first, 0);
  EXPECT_NE(bad.second.find("a tag is KEY=VALUE"), std::string::npos) << bad.second;
}

TEST(StudioRuns, TheTrackerSendsATrainingRunsMetrics) {
  auto dir = fresh_dir("runs_tracker");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  httplib::Client c("127.0.0.1", s.port);
  c.set_bearer_token_auth(token);
  int64_t id = submit(c, "sleep 0.1");
  auto tracker = std::make_shared<train::RunTracker>(s.url(), token, id, /*every=*/1);
  train_small({tracker});
  // 4 steps an epoch, 2 epochs; per epoch its loss, throughput, learning rate and number (no validation)
  EXPECT_EQ(tracker->points_sent(), 8 + 2 * 4);
  json m = json::parse(c.Get("/api/v1/jobs/" + std::to_string(id) + "/metrics")->body)["metrics"];
  ASSERT_EQ(m["loss"].size(), 8u);
  ASSERT_EQ(m["epoch_loss"].size(), 2u);
  EXPECT_LT(m["epoch_loss"][1][1].get<double>(), m["epoch_loss"][0][1].get<double>() * 1.5);
  json p = json::parse(c.Get("/api/v1/jobs/" + std::to_string(id) + "/params")->body)["params"];
  EXPECT_EQ(p["optimizer"], "SGD");
}

TEST(StudioRuns, AnUnreachableStudioCostsTheRunNothing) {
  auto tracker = std::make_shared<train::RunTracker>("http://127.0.0.1:1", "kst_x", 1, 1);
  ::testing::internal::CaptureStderr();
  auto start = std::chrono::steady_clock::now();
  train_small({tracker}, 3);
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds, 10.0);
  EXPECT_EQ(tracker->points_sent(), 0);
  EXPECT_NE(err.find("training goes on"), std::string::npos) << err;
}

TEST(StudioRuns, AJobGetsTheStudioAndATokenOfItsOwn) {
  auto dir = fresh_dir("runs_env");
  Studio s(dir);
  httplib::Client c("127.0.0.1", s.port);
  c.set_bearer_token_auth(kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  int64_t id = submit(c, std::string(KILN_CLI) + " store ls studio:// && echo token=$KILN_STUDIO_TOKEN");
  json done = wait_done(c, id);
  ASSERT_EQ(done["state"], "Completed") << done.dump();
  json logs = json::parse(c.Get("/api/v1/jobs/" + std::to_string(id) + "/logs")->body)["lines"];
  std::string text;
  for (auto& l : logs) text += l["text"].get<std::string>() + "\n";
  EXPECT_NE(text.find("no buckets yet"), std::string::npos) << text;  // the store answered the job's token
  size_t at = text.find("token=");
  ASSERT_NE(at, std::string::npos);
  std::string job_token = text.substr(at + 6, text.find('\n', at) - at - 6);
  httplib::Client after("127.0.0.1", s.port);
  after.set_bearer_token_auth(job_token);
  EXPECT_EQ(after.Get("/api/v1/buckets")->status, 401);  // revoked when the job ended
}

// Training jobs under the studio's local executor: inputs staged from the
// store, ranks started through kiln launch, logs per rank with search,
// output synced back, failures that name the rank, stopping, and a studio
// restart in the middle of a job.
#include <gtest/gtest.h>
#include <httplib.h>

#include <array>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kiln/studio.h"
#include "support/job_api.h"
#include "support/job_files.h"
#include "studio/executors.h"
#include "studio/memory_cgroup.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::Studio;
using kiln::testing::text_of;

namespace {

using Api = kiln::testing::JobApi;
using kiln::testing::shell_job;

}  // namespace

TEST(StudioJobs, ARunStagesItsInputsKeepsPerRankLogsAndSyncsItsOutput) {
  auto dir = fresh_dir("jobs_run");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  ASSERT_EQ(api.client.Put("/api/v1/buckets/data", "", "text/plain")->status, 201);
  ASSERT_EQ(api.client.Put("/api/v1/buckets/data/objects/fmnist/labels.txt", "7 2 1", "text/plain")->status, 201);
  json spec = shell_job("read and write",
                        "echo rank $RANK of $WORLD_SIZE starts; echo labels $(cat $KILN_DATA_URL/labels.txt); "
                        "echo weights-$RANK > $KILN_TRAIN_URL/model-$RANK.txt; echo rank $RANK done");
  spec["inputs"] = {{"data_url", "studio://data/fmnist"}};
  spec["output"] = "studio://runs/job-a";
  spec["env"] = {{"API_KEY", "s3cr3t-value"}};
  int64_t id = api.submit(spec);
  json done = api.wait_for(id, {"Completed", "Failed", "Abnormal"});
  ASSERT_EQ(done["state"], "Completed") << done.dump();
  // Answers show the variable's name, never its value.
  EXPECT_EQ(done["spec"]["env"]["API_KEY"], "********");
  EXPECT_EQ(done.dump().find("s3cr3t"), std::string::npos) << done.dump();
  EXPECT_EQ(api.client.Get("/api/v1/jobs")->body.find("s3cr3t"), std::string::npos);
  EXPECT_EQ(done["exit_code"], 0);
  EXPECT_EQ(done["submitted_by"], "ci");
  // The stages, each entered once, in order.
  const json& stages = done["stage_times"];
  ASSERT_EQ(stages.size(), 4u) << done.dump();
  EXPECT_LE(stages["scheduling"].get<int64_t>(), stages["preparing"].get<int64_t>());
  EXPECT_LE(stages["preparing"].get<int64_t>(), stages["running"].get<int64_t>());
  EXPECT_LE(stages["running"].get<int64_t>(), stages["end"].get<int64_t>());
  EXPECT_EQ(stages["scheduling"], done["created_ms"]);
  // Logs: every rank's lines, filtered by rank and by keyword.
  json all = api.get("/api/v1/jobs/" + std::to_string(id) + "/logs");
  EXPECT_EQ(all["total"], 6);
  json one = api.get("/api/v1/jobs/" + std::to_string(id) + "/logs?rank=1&grep=labels");
  ASSERT_EQ(one["lines"].size(), 1u) << one.dump();
  EXPECT_EQ(one["lines"][0]["text"], "labels 7 2 1");
  EXPECT_EQ(one["lines"][0]["rank"], 1);
  // A pattern that is not one, or a count out of range, is a 400 that says so, not an empty answer.
  auto bad = api.client.Get("/api/v1/jobs/" + std::to_string(id) + "/logs?grep=labels%20[");
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("is not a regular expression"), std::string::npos) << bad->body;
  auto everything = api.client.Get("/api/v1/jobs?limit=-1");
  EXPECT_EQ(everything->status, 400);
  EXPECT_NE(everything->body.find("'limit' must be from 1 to 10000, not -1"), std::string::npos) << everything->body;
  // The output and the logs are in the store.
  EXPECT_EQ(api.client.Get("/api/v1/buckets/runs/objects/job-a/model-1.txt")->body, "weights-1\n");
  auto log = api.client.Get("/api/v1/buckets/runs/objects/job-a/logs/rank-0.log");
  ASSERT_EQ(log->status, 200);
  EXPECT_NE(log->body.find("rank 0 done"), std::string::npos);
}

TEST(StudioJobs, AFailingRankFailsTheJobByName) {
  auto dir = fresh_dir("jobs_fail");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  auto started = std::chrono::steady_clock::now();
  int64_t id = api.submit(shell_job("crash", "if [ \"$RANK\" = 1 ]; then echo out of patience; exit 3; fi; sleep 30"));
  json done = api.wait_for(id, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(done["state"], "Failed");
  EXPECT_EQ(done["exit_code"], 3);
  std::string reason = done["reason"];
  EXPECT_NE(reason.find("rank 1"), std::string::npos) << reason;
  EXPECT_NE(reason.find("exited with status 3"), std::string::npos) << reason;
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(25));  // rank 0 was not waited for
}

// The events of a server-sent stream as (event, id, data), read until the
// server ends it.
std::vector<std::array<std::string, 3>> read_events(httplib::Client& c, const std::string& path,
                                                    const httplib::Headers& headers = {}) {
  std::string body, type;
  c.set_read_timeout(60, 0);
  auto r = c.Get(
      path, headers,
      [&](const httplib::Response& head) {
        type = head.get_header_value("Content-Type");
        return true;
      },
      [&](const char* bytes, size_t n) {
        body.append(bytes, n);
        return true;
      });
  EXPECT_TRUE(r) << "the stream failed";
  EXPECT_EQ(type, "text/event-stream");
  std::vector<std::array<std::string, 3>> events;
  for (size_t at = 0, end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    std::istringstream block(body.substr(at, end - at));
    std::array<std::string, 3> e;
    for (std::string line; std::getline(block, line);) {
      if (line.rfind("event: ", 0) == 0) e[0] = line.substr(7);
      if (line.rfind("id: ", 0) == 0) e[1] = line.substr(4);
      if (line.rfind("data: ", 0) == 0) e[2] = line.substr(6);
    }
    if (!e[0].empty()) events.push_back(e);
  }
  return events;
}

TEST(StudioJobs, LogsFollowAsServerSentEventsUntilTheJobEnds) {
  auto dir = fresh_dir("jobs_follow");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  Api api(s.port, token);
  int64_t id = api.submit(shell_job("ticker", "for i in 1 2 3 4; do echo tick $i from $RANK; sleep 0.3; done"));
  const std::string logs = "/api/v1/jobs/" + std::to_string(id) + "/logs";
  // Opened while the job runs: every line as it is written, then the end.
  auto events = read_events(api.client, logs + "?follow=true");
  ASSERT_EQ(events.size(), 9u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(events[i][0], "line");
    EXPECT_EQ(events[i][1], std::to_string(i + 1));  // ids count the lines sent
    EXPECT_NE(json::parse(events[i][2])["text"].get<std::string>().find("tick"), std::string::npos);
  }
  EXPECT_EQ(events[8][0], "end");
  EXPECT_EQ(json::parse(events[8][2])["state"], "Completed");
  // A client that reconnects with the last id it saw gets the rest only.
  auto rest = read_events(api.client, logs, {{"Accept", "text/event-stream"}, {"Last-Event-ID", "6"}});
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0][1], "7");
  EXPECT_EQ(rest[0][2], events[6][2]);
  // Filters apply; a bad one is refused before the stream starts.
  auto one_rank = read_events(api.client, logs + "?follow=true&rank=1&grep=tick%20[34]");
  ASSERT_EQ(one_rank.size(), 3u);
  EXPECT_EQ(json::parse(one_rank[1][2])["text"], "tick 4 from 1");
  auto bad = api.client.Get(logs + "?follow=true&grep=tick%20[");
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("not a regular expression"), std::string::npos) << bad->body;
  // kiln job logs --follow prints what the stream carries and returns at the end.
  int64_t second = api.submit(shell_job("ticker", "sleep 0.5; echo late line from $RANK"));
  auto followed = s.kiln(token, dir, "job logs " + std::to_string(second) + " --follow");
  EXPECT_EQ(followed.first, 0) << followed.second;
  EXPECT_NE(followed.second.find("[rank 0] late line from 0\n"), std::string::npos) << followed.second;
  EXPECT_NE(followed.second.find("[rank 1] late line from 1\n"), std::string::npos) << followed.second;
}

TEST(StudioJobs, TheSlurmExecutorWithoutAClusterIsRefusedAtStart) {
  auto dir = fresh_dir("jobs_no_slurm");
  const char* before = std::getenv("SLURM_CONF");
  const std::string saved = before ? before : "";
  ::setenv("SLURM_CONF", (dir + "/missing-slurm.conf").c_str(), 1);
  studio::StudioOptions o;
  o.data_dir = dir;
  o.executor = "slurm";
  try {
    studio::StudioServer server(o);
    ADD_FAILURE() << "a studio started with --executor slurm and no Slurm configuration";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no Slurm configuration at " + dir + "/missing-slurm.conf; set SLURM_CONF"),
              std::string::npos) << e.what();
  }
  if (before) ::setenv("SLURM_CONF", saved.c_str(), 1);
  else ::unsetenv("SLURM_CONF");
}

TEST(StudioJobs, StoppingEndsTerminatedWithNoProcessLeft) {
  auto dir = fresh_dir("jobs_stop");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  int64_t id = api.submit(shell_job("sleeper", "echo started; exec sleep 61.375"));
  api.wait_for(id, {"Running"});
  for (int i = 0; i < 100 && api.get("/api/v1/jobs/" + std::to_string(id) + "/logs")["total"] < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto r = api.client.Post("/api/v1/jobs/" + std::to_string(id) + "/stop", "", "application/json");
  ASSERT_EQ(r->status, 202) << r->body;
  json done = api.wait_for(id, {"Terminated", "Failed", "Completed", "Abnormal"});
  EXPECT_EQ(done["state"], "Terminated") << done.dump();
  EXPECT_NE(std::system("pgrep -f 'sleep 61[.]375' > /dev/null"), 0) << "a rank outlived its job";
  auto again = api.client.Post("/api/v1/jobs/" + std::to_string(id) + "/stop", "", "application/json");
  EXPECT_EQ(again->status, 400);  // nothing left to stop
}

// A studio of two cores: three one-core jobs run two at a time, the third
// waits saying for what and behind whom, and starts when a core frees; a job
// asking for more than the studio has is refused; a waiting job can be stopped.
TEST(StudioJobs, JobsWaitForTheirCoresInTurnAndSayWhy) {
  auto dir = fresh_dir("jobs_queue");
  Studio s(dir, size_t{1} << 30, "", "local", 2);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  json one = shell_job("one core", "sleep 1.5", 1);
  one["resources"] = {{"cpus", 1}};
  const int64_t a = api.submit(one), b = api.submit(one), c = api.submit(one);
  // (Until the first two have started, it waits behind them in the queue.)
  const std::string both = std::to_string(a) + ", " + std::to_string(b);
  const std::string why = "waiting for 1 CPU core (2 of 2 in use by jobs " + both + ")";
  json waiting;
  for (int i = 0; i < 200; ++i) {
    waiting = api.get("/api/v1/jobs/" + std::to_string(c));
    if (waiting["reason"] == why || waiting["state"] == "Running" || waiting["state"] == "Completed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(waiting["state"], "Pending") << waiting.dump();
  EXPECT_EQ(waiting["stage"], "queued") << waiting.dump();
  EXPECT_EQ(waiting["reason"], why) << waiting.dump();
  json ja = api.wait_for(a, {"Completed", "Failed"}), jb = api.wait_for(b, {"Completed", "Failed"});
  json jc = api.wait_for(c, {"Completed", "Failed"});
  EXPECT_EQ(jc["state"], "Completed") << jc.dump();
  EXPECT_GE(jc["started_ms"].get<int64_t>(), std::min(ja["ended_ms"].get<int64_t>(), jb["ended_ms"].get<int64_t>()));
  EXPECT_EQ(jc["spec"]["resources"]["cpus"], 1);

  json big = shell_job("big", "true", 1);
  big["resources"] = {{"cpus", 3}};
  auto refused = api.client.Post("/api/v1/jobs", big.dump(), "application/json");
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("asks for 3 CPU cores; this studio runs jobs on 2"), std::string::npos) << refused->body;

  json two = shell_job("two cores", "exec sleep 30", 1);
  two["resources"] = {{"cpus", 2}};
  const int64_t first = api.submit(two), second = api.submit(two);
  api.wait_for(first, {"Running"});
  for (int i = 0; i < 100 && api.get("/api/v1/jobs/" + std::to_string(second))["stage"] != "queued"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(api.client.Post("/api/v1/jobs/" + std::to_string(second) + "/stop", "", "application/json")->status, 202);
  json stopped = api.wait_for(second, {"Terminated", "Failed", "Completed"});
  EXPECT_EQ(stopped["state"], "Terminated") << stopped.dump();
  EXPECT_EQ(stopped["reason"], "stopped while waiting in the queue");
  ASSERT_EQ(api.client.Post("/api/v1/jobs/" + std::to_string(first) + "/stop", "", "application/json")->status, 202);
  api.wait_for(first, {"Terminated"});
}

// `kiln studio serve` waits for SIGTERM with it blocked in every thread; the
// jobs it starts must not inherit that. Stopped on request or at their time
// limit, all ranks end before the job says so, and soon.
TEST(StudioJobs, AStudioThatBlocksSigtermStillStopsEveryRank) {
  sigset_t stopping, before;
  sigemptyset(&stopping);
  sigaddset(&stopping, SIGTERM);
  sigaddset(&stopping, SIGINT);
  ::pthread_sigmask(SIG_BLOCK, &stopping, &before);
  {
    auto dir = fresh_dir("jobs_stop_masked");
    Studio s(dir);
    Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
    auto ranks_left = [] { return std::system("pgrep -f 'sleep 61[.]625' > /dev/null") == 0; };
    int64_t id = api.submit(shell_job("sleepers", "echo started; exec sleep 61.625"));
    api.wait_for(id, {"Running"});
    for (int i = 0; i < 100 && api.get("/api/v1/jobs/" + std::to_string(id) + "/logs")["total"] < 2; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto asked = std::chrono::steady_clock::now();
    ASSERT_EQ(api.client.Post("/api/v1/jobs/" + std::to_string(id) + "/stop", "", "application/json")->status, 202);
    json done = api.wait_for(id, {"Terminated", "Failed", "Completed", "Abnormal"});
    EXPECT_FALSE(ranks_left()) << "a rank outlived its stopped job";
    EXPECT_EQ(done["state"], "Terminated") << done.dump();
    EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(10)) << "the ranks ignored SIGTERM";

    json limited = shell_job("overtime", "echo started; exec sleep 61.625");
    limited["time_limit_s"] = 2;
    const auto submitted = std::chrono::steady_clock::now();
    id = api.submit(limited);
    done = api.wait_for(id, {"Terminated", "Failed", "Completed", "Abnormal"});
    EXPECT_FALSE(ranks_left()) << "a rank outlived its job's time limit";
    EXPECT_EQ(done["state"], "Failed") << done.dump();
    EXPECT_NE(done["reason"].get<std::string>().find("time limit"), std::string::npos) << done.dump();
    EXPECT_LT(std::chrono::steady_clock::now() - submitted, std::chrono::seconds(12));
  }
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

TEST(StudioJobs, ARestartMidJobKeepsItsRecordAndLogs) {
  auto dir = fresh_dir("jobs_restart");
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  int64_t id = 0;
  {
    Studio s(dir);
    Api api(s.port, token);
    id = api.submit(shell_job("long", "echo working; exec sleep 62.125", 1));
    api.wait_for(id, {"Running"});
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }  // the studio stops with the job running
  EXPECT_NE(std::system("pgrep -f 'sleep 62[.]125' > /dev/null"), 0);
  Studio s(dir);
  Api api(s.port, token);
  json j = api.get("/api/v1/jobs/" + std::to_string(id));
  EXPECT_EQ(j["state"], "Abnormal");
  EXPECT_NE(j["reason"].get<std::string>().find("studio"), std::string::npos) << j.dump();
  EXPECT_EQ(api.get("/api/v1/jobs/" + std::to_string(id) + "/logs?grep=working")["total"], 1);
}

TEST(StudioJobs, BadSpecsAreRefusedByName) {
  auto dir = fresh_dir("jobs_bad");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  auto refuse = [&](const std::string& body) {
    auto r = api.client.Post("/api/v1/jobs", body, "application/json");
    EXPECT_EQ(r->status, 400) << body;
    return json::parse(r->body).value("error", "");
  };
  EXPECT_NE(refuse(R"({"name": "x", "command": ["true"], "nprocs": 2})").find("unknown key 'nprocs'"), std::string::npos);
  EXPECT_NE(refuse(R"({"name": "x"})").find("'recipe'"), std::string::npos);
  EXPECT_NE(refuse(R"({"name": "x", "command": ["true"], "nproc": 0})").find("nproc"), std::string::npos);
  EXPECT_NE(refuse(R"({"name": "x", "command": ["true"], "nnodes": 2})").find("needs the Slurm executor"),
            std::string::npos);
  EXPECT_NE(refuse(R"({"name": "x", "command": ["true"], "inputs": {"d": "studio://data/../etc"}})").find(".."),
            std::string::npos);
  EXPECT_NE(refuse(R"({"name": "x", "command": ["true"], "inputs": {"d": "studio://nope/x"}})").find("no bucket"),
            std::string::npos);
  EXPECT_NE(refuse("{not json").find("not valid JSON"), std::string::npos);
  auto reader = kiln::testing::create_token(dir, "viewer", studio::Scope::Read);
  Api viewer(s.port, reader);
  EXPECT_EQ(viewer.client.Post("/api/v1/jobs", R"({"name": "x", "command": ["true"]})", "application/json")->status, 403);
}

TEST(StudioJobs, TheJobCommandsSubmitWaitAndSearchLogs) {
  auto dir = fresh_dir("jobs_cli");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  std::ofstream(dir + "/spec.yaml") << "name: hello\nnproc: 2\ncommand: [/bin/sh, -c, 'echo hello from $RANK', job]\n";
  auto run = [&](const std::string& args) { return s.kiln(token, dir, "job " + args); };
  auto submitted = run("submit " + dir + "/spec.yaml --wait");
  ASSERT_EQ(submitted.first, 0) << submitted.second;
  EXPECT_NE(submitted.second.find("state   Completed"), std::string::npos) << submitted.second;
  auto logs = run("logs 1 --grep 'from 1'");
  EXPECT_EQ(logs.second, "[rank 1] hello from 1\n");
  auto list = run("list");
  EXPECT_NE(list.second.find("Completed"), std::string::npos) << list.second;
  std::ofstream(dir + "/bad.yaml") << "name: bad\ncommand: [true]\nnproc: many\n";
  auto bad = run("submit " + dir + "/bad.yaml");
  EXPECT_NE(bad.first, 0);
  EXPECT_NE(bad.second.find("'nproc' must be a number"), std::string::npos) << bad.second;
}

// The whole path as a team runs it: Fashion-MNIST uploaded to the store, W1
// trained as a 2-rank recipe job reading it, its logs searched, its metrics
// read, its checkpoint and metrics downloaded from the store.
TEST(StudioJobs, W1AsATwoRankJobFromUploadToCheckpoint) {
  auto dir = fresh_dir("jobs_w1");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  auto run = [&](const std::string& args) { return s.kiln(token, dir, args); };
  ASSERT_TRUE(s.upload_fashion_mnist(token, dir));
  std::ofstream(dir + "/w1.yaml") << "model: mlp\nmodel_config: {hidden: [512, 256]}\ndataset: fashion_mnist\n"
                                     "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\nschedule: {name: cosine}\n"
                                     "epochs: 1\nmax_steps: 300\nbatch_size: 64\nseed: 0\n";
  std::ofstream(dir + "/job.yaml") << "name: w1\nrecipe: " << dir << "/w1.yaml\nnproc: 2\n"
                                      "inputs: {data_url: studio://data/fmnist}\noutput: studio://runs/w1\n"
                                      "env: {KILN_NUM_THREADS: '1'}\n";
  auto job = run("job submit " + dir + "/job.yaml --wait");
  ASSERT_EQ(job.first, 0) << job.second << text_of(dir + "/jobs/1/launcher.log");
  auto logs = run("job logs 1 --rank 0 --grep accuracy");
  EXPECT_NE(logs.second.find("[rank 0] test accuracy"), std::string::npos) << logs.second;
  auto metrics = run("job metrics 1");
  EXPECT_NE(metrics.second.find("metric  loss"), std::string::npos) << metrics.second;
  EXPECT_NE(metrics.second.find("param   optimizer"), std::string::npos) << metrics.second;
  auto down = run("store cp studio://runs/w1 " + dir + "/result");
  ASSERT_EQ(down.first, 0) << down.second;
  EXPECT_TRUE(std::filesystem::exists(dir + "/result/checkpoint.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/result/logs/rank-1.log"));
  auto result = json::parse(text_of(dir + "/result/metrics.json"));
  EXPECT_EQ(result["ranks"], 2);
  EXPECT_GE(result["accuracy"].get<double>(), 0.75) << result.dump();
  // The job list carries the test set's figures, as the console shows them.
  Api api(s.port, token);
  json listed = api.get("/api/v1/jobs")["jobs"][0]["final_metrics"];
  ASSERT_TRUE(listed.contains("test_accuracy")) << listed.dump();
  EXPECT_NEAR(listed["test_accuracy"].get<double>(), result["accuracy"].get<double>(), 1e-6) << listed.dump();
}

// A job's code_dir is uploaded at submission and the ranks run in it; a
// retry runs the same code again as a new job.
// A job's environment values are kept apart from its spec: the job (and its
// retry) gets them, no answer shows them.
TEST(StudioJobs, EnvironmentValuesReachTheJobAndItsRetryButNoAnswer) {
  auto dir = fresh_dir("jobs_env");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  // The script checks the value by its MD5, so that the spec itself does not hold it.
  json spec = shell_job("secretive", "[ \"$(printf %s \"$API_KEY\" | md5sum | cut -d' ' -f1)\" = "
                                     "e74a7345b906b2dd50c8e026a10bc02f ] && echo the key arrived", 1);
  spec["env"] = {{"API_KEY", "s3cr3t-value"}};
  const int64_t id = api.submit(spec);
  EXPECT_EQ(api.wait_for(id, {"Completed", "Failed", "Abnormal"})["state"], "Completed");
  auto retried = api.client.Post("/api/v1/jobs/" + std::to_string(id) + "/retry", "", "application/json");
  ASSERT_EQ(retried->status, 201) << retried->body;
  const int64_t again = json::parse(retried->body)["id"];
  json done = api.wait_for(again, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(done["state"], "Completed") << "the retry ran without the value: " << done.dump();
  EXPECT_EQ(done["spec"]["env"]["API_KEY"], "********");
  for (const std::string& path : {std::string("/api/v1/jobs"), "/api/v1/jobs/" + std::to_string(id),
                                  "/api/v1/jobs/" + std::to_string(again)})
    EXPECT_EQ(api.client.Get(path)->body.find("s3cr3t"), std::string::npos) << path;
}

TEST(StudioJobs, CodeIsUploadedAtSubmissionAndRetriesRunItAgain) {
  auto dir = fresh_dir("jobs_code");
  Studio s(dir);
  std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  std::filesystem::create_directories(dir + "/project/scripts");
  std::ofstream(dir + "/project/scripts/run.sh") << "echo running $(basename $(pwd)) rank $RANK\n";
  std::ofstream(dir + "/spec.yaml") << "name: From Code\ncode_dir: project\nnproc: 2\ncommand: [/bin/sh, scripts/run.sh]\n";
  auto run = [&](const std::string& args) { return s.kiln(token, dir, "job " + args); };
  auto first = run("submit " + dir + "/spec.yaml --wait");
  ASSERT_EQ(first.first, 0) << first.second;
  EXPECT_NE(first.second.find("studio://studio-jobs/code/from-code-"), std::string::npos) << first.second;
  std::ofstream(dir + "/project/scripts/run.sh") << "exit 1\n";  // later edits do not reach the submitted job
  auto again = run("retry 1");
  ASSERT_EQ(again.first, 0) << again.second;
  EXPECT_EQ(again.second, "2\n");
  Api api(s.port, token);
  json done = api.wait_for(2, {"Completed", "Failed"});
  EXPECT_EQ(done["state"], "Completed") << done.dump();
  auto logs = run("logs 2 --rank 1");
  EXPECT_EQ(logs.second, "[rank 1] running code rank 1\n");
}

// resources.memory_mb is a limit the kernel enforces (a memory cgroup per
// job), where the machine gives the studio one: a job that goes past it is
// killed, and its reason says why; one within it completes.
TEST(StudioJobs, AJobPastItsMemoryIsKilledAndSaysSo) {
  std::string why;
  if (!studio::MemoryCgroup::create("kiln-test-probe-" + std::to_string(::getpid()), 64, &why))
    GTEST_SKIP() << "memory is not enforced on this machine: " << why;
  auto dir = fresh_dir("jobs_memory");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  // tail keeps the whole line it is reading: 300 MB of zeros without a newline.
  json greedy = shell_job("greedy", "head -c 300M /dev/zero | tail > /dev/null", 1);
  greedy["resources"] = {{"memory_mb", 64}};
  json modest = shell_job("modest", "head -c 10M /dev/zero | tail > /dev/null", 1);
  modest["resources"] = "cpu-1";  // a flavour: 1 core, 4 GB
  const int64_t a = api.submit(greedy), b = api.submit(modest);
  json killed = api.wait_for(a, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(killed["state"], "Failed") << killed.dump();
  EXPECT_NE(killed["reason"].get<std::string>().find("went past its 64 MB of memory"), std::string::npos) << killed.dump();
  const json done = api.wait_for(b, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(done["state"], "Completed");
  EXPECT_EQ(done["spec"]["resources"], json({{"cpus", 1}, {"gpus", 0}, {"memory_mb", 4096}}));
  json odd = shell_job("odd", "true", 1);
  odd["resources"] = "tpu-2";
  auto refused = api.client.Post("/api/v1/jobs", odd.dump(), "application/json");
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("'tpu-2' is not a flavour: the studio offers cpu-N"), std::string::npos) << refused->body;
}

// Each local job runs in a sandbox (bubblewrap, where it works here): its
// folder, HOME and TMPDIR writable, the machine read-only, the studio's data
// (the database, the store, other jobs' folders) and other processes out of sight.
TEST(StudioJobs, AJobRunsInASandboxThatHidesTheStudiosData) {
  std::string why;
  if (studio::sandbox_program(&why).empty()) GTEST_SKIP() << why;
  auto dir = fresh_dir("jobs_sandbox");
  Studio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  const int64_t first = api.submit(shell_job("first", "echo mine > mine.txt", 1));
  ASSERT_EQ(api.wait_for(first, {"Completed", "Failed"})["state"], "Completed");
  const std::string data = std::filesystem::canonical(dir).string();
  json spec = shell_job("curious",
                        "ls " + data + "/studio.db " + data + "/jobs/" + std::to_string(first) + "/mine.txt 2>&1 | "
                        "sed 's/^/seen: /'; echo processes $(ls /proc | grep -c '^[0-9]*$'); "
                        "touch $HOME/x $TMPDIR/x && echo home writable; touch /usr/kiln-sandbox 2>/dev/null || echo root read-only; "
                        "echo here > here.txt && echo folder writable",
                        1);
  const int64_t id = api.submit(spec);
  ASSERT_EQ(api.wait_for(id, {"Completed", "Failed"})["state"], "Completed");
  const json logs = api.get("/api/v1/jobs/" + std::to_string(id) + "/logs");
  std::string out;
  for (const auto& line : logs["lines"]) out += line["text"].get<std::string>() + "\n";
  EXPECT_NE(out.find("studio.db': No such file or directory"), std::string::npos) << out;
  EXPECT_NE(out.find("mine.txt': No such file or directory"), std::string::npos) << out;
  EXPECT_NE(out.find("home writable"), std::string::npos) << out;
  EXPECT_NE(out.find("root read-only"), std::string::npos) << out;
  EXPECT_NE(out.find("folder writable"), std::string::npos) << out;
  // The sandbox's init, the launcher, its rank's shell and the commands it runs: not the machine's processes.
  const size_t at = out.find("processes ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_LT(std::stoi(out.substr(at + 10)), 12) << out;
}

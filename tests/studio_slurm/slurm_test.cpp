// Training jobs under the Slurm executor, against a real Slurm cluster of two
// nodes on this machine that tests/support/with_slurm.sh starts (SLURM_CONF):
// the queue, states, logs and output, a failing rank, a stop, a studio
// restart mid-job, and W1 trained on two nodes.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "kiln/studio.h"
#include "support/job_api.h"
#include "support/job_files.h"
#include "support/studio_fixture.h"

using namespace kiln;
using json = nlohmann::json;
using kiln::testing::fresh_dir;
using kiln::testing::shell_job;
using Api = kiln::testing::JobApi;
using kiln::testing::text_of;

namespace {

struct SlurmStudio : kiln::testing::Studio {
  explicit SlurmStudio(const std::string& dir) : Studio(dir, size_t{1} << 30, "", "slurm") {}
};

// A field of `scontrol show job` for a Slurm job (its JobState, NodeList, ...).
std::string slurm_field(const std::string& slurm_id, const std::string& key = "JobState") {
  const std::string out = "/tmp/kiln_slurm_job_" + slurm_id;
  std::system(("scontrol show job -o " + slurm_id + " > " + out + " 2>&1").c_str());
  std::string record = text_of(out);
  std::remove(out.c_str());
  const size_t at = record.find(" " + key + "=");
  if (at == std::string::npos) return record;
  const size_t from = at + key.size() + 2;
  return record.substr(from, record.find(' ', from) - from);
}

class SlurmJobs : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::getenv("SLURM_CONF")) GTEST_SKIP() << "run through tests/support/with_slurm.sh (ctest: studio_slurm)";
  }
};

}  // namespace

TEST_F(SlurmJobs, AJobGoesThroughTheQueueWithItsLogsAndOutput) {
  auto dir = fresh_dir("slurm_run");
  SlurmStudio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  Api api(s.port, token);
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/data/numbers.txt") << "1 2 3\n";
  ASSERT_EQ(s.kiln(token, dir, "store mb studio://data").first, 0);
  ASSERT_EQ(s.kiln(token, dir, "store cp " + dir + "/data studio://data/in").first, 0);
  json spec = shell_job("counted", "echo rank $RANK of $WORLD_SIZE in slurm job $SLURM_JOB_ID; "
                                   "wc -w < $KILN_DATA_URL/numbers.txt > $KILN_TRAIN_URL/count-$RANK.txt");
  spec["inputs"] = {{"d", "studio://data/in"}};
  spec["output"] = "studio://runs/counted";
  const int64_t id = api.submit(spec);
  json done = api.wait_for(id, {"Completed", "Failed", "Abnormal"});
  ASSERT_EQ(done["state"], "Completed") << done.dump() << text_of(dir + "/jobs/" + std::to_string(id) + "/launcher.log");
  EXPECT_EQ(done["executor"], "slurm");
  const std::string slurm_id = done.value("external_id", "");
  ASSERT_FALSE(slurm_id.empty()) << done.dump();
  EXPECT_EQ(slurm_field(slurm_id), "COMPLETED");
  auto logs = api.get("/api/v1/jobs/" + std::to_string(id) + "/logs?rank=1");
  ASSERT_EQ(logs["total"], 1) << logs.dump();
  EXPECT_EQ(logs["lines"][0]["text"], "rank 1 of 2 in slurm job " + slurm_id);
  auto count = api.client.Get("/api/v1/buckets/runs/objects/counted/count-0.txt");
  ASSERT_EQ(count->status, 200);
  EXPECT_EQ(count->body, "3\n");
}

TEST_F(SlurmJobs, AFailingRankAndAStopEndAsTheyDoLocally) {
  auto dir = fresh_dir("slurm_fail");
  SlurmStudio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  const int64_t failing = api.submit(shell_job("failing", "if [ $RANK = 1 ]; then echo broken >&2; exit 3; fi; sleep 30"));
  json failed = api.wait_for(failing, {"Failed", "Completed", "Abnormal"});
  EXPECT_EQ(failed["state"], "Failed");
  EXPECT_NE(failed["reason"].get<std::string>().find("rank 1"), std::string::npos) << failed.dump();
  EXPECT_EQ(failed["exit_code"], 3) << failed.dump();

  const int64_t sleeper = api.submit(shell_job("sleeper", "echo started; exec sleep 63.25"));
  api.wait_for(sleeper, {"Running"});
  for (int i = 0; i < 100; ++i) {  // both ranks have started
    if (api.get("/api/v1/jobs/" + std::to_string(sleeper) + "/logs")["total"] == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(api.client.Post("/api/v1/jobs/" + std::to_string(sleeper) + "/stop", "", "application/json")->status, 202);
  json stopped = api.wait_for(sleeper, {"Terminated", "Failed", "Completed", "Abnormal"});
  EXPECT_EQ(stopped["state"], "Terminated") << stopped.dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_NE(std::system("pgrep -f 'sleep 63[.]25' > /dev/null"), 0) << "a rank outlived its job";
}

TEST_F(SlurmJobs, AJobWaitsPendingWhileTheClusterIsFull) {
  auto dir = fresh_dir("slurm_queue");
  SlurmStudio s(dir);
  Api api(s.port, kiln::testing::create_token(dir, "ci", studio::Scope::Write));
  // Another user's job holds every node.
  ASSERT_EQ(std::system(("sbatch --parsable --exclusive -N 2 -o /dev/null --wrap 'sleep 30' > " + dir + "/blocker").c_str()), 0);
  const std::string blocker = text_of(dir + "/blocker").substr(0, text_of(dir + "/blocker").find('\n'));
  const int64_t queued = api.submit(shell_job("queued", "echo ran", 1));
  json pending = api.wait_for(queued, {"Pending"});
  // The reason is Slurm's own (the nodes are busy), not only "waiting".
  auto says_why = [](const json& j) { return j.value("reason", "").find("(Slurm's reason: ") != std::string::npos; };
  for (int i = 0; i < 50 && !says_why(pending); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pending = api.get("/api/v1/jobs/" + std::to_string(queued));
  }
  const std::string reason = pending.value("reason", "");
  EXPECT_EQ(reason.rfind("waiting in Slurm's queue (Slurm's reason: ", 0), 0u) << pending.dump();
  EXPECT_TRUE(reason.find("Resources: the nodes it needs are busy") != std::string::npos ||
              reason.find("Priority") != std::string::npos) << reason;
  EXPECT_EQ(slurm_field(pending.value("external_id", "?")), "PENDING");
  // A queued job stopped leaves the queue at once.
  const int64_t second = api.submit(shell_job("never", "echo never", 1));
  api.wait_for(second, {"Pending"});
  for (int i = 0; i < 50 && api.get("/api/v1/jobs/" + std::to_string(second)).value("external_id", "").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(api.client.Post("/api/v1/jobs/" + std::to_string(second) + "/stop", "", "application/json")->status, 202);
  json stopped = api.wait_for(second, {"Terminated", "Failed", "Completed"}, 10);
  EXPECT_EQ(stopped["state"], "Terminated") << stopped.dump();
  // Once the nodes are free, the first one runs.
  std::system(("scancel " + blocker).c_str());
  json done = api.wait_for(queued, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(done["state"], "Completed") << done.dump();
}

TEST_F(SlurmJobs, AStudioStartedAgainWatchesTheJobsSlurmKeptRunning) {
  auto dir = fresh_dir("slurm_restart");
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  int64_t id = 0;
  std::string slurm_id;
  {
    SlurmStudio s(dir);
    Api api(s.port, token);
    id = api.submit(shell_job("patient", "echo waiting; sleep 4; echo finished", 1));
    // Running under Slurm: submitted (it has its Slurm id) and out of the queue.
    for (int i = 0; i < 300 && slurm_id.empty(); ++i) {
      json j = api.get("/api/v1/jobs/" + std::to_string(id));
      if (j["state"] == "Running" && j["stage"] == "running") slurm_id = j.value("external_id", "");
      if (slurm_id.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }  // the studio stops; Slurm goes on
  ASSERT_FALSE(slurm_id.empty());
  EXPECT_EQ(slurm_field(slurm_id), "RUNNING");
  SlurmStudio s(dir);
  Api api(s.port, token);
  json done = api.wait_for(id, {"Completed", "Failed", "Abnormal"});
  EXPECT_EQ(done["state"], "Completed") << done.dump();
  auto logs = api.get("/api/v1/jobs/" + std::to_string(id) + "/logs?grep=finished");
  EXPECT_EQ(logs["total"], 1) << logs.dump();
}

TEST_F(SlurmJobs, W1TrainsOnTwoNodes) {
  auto dir = fresh_dir("slurm_w1");
  SlurmStudio s(dir);
  const std::string token = kiln::testing::create_token(dir, "ci", studio::Scope::Write);
  ASSERT_TRUE(s.upload_fashion_mnist(token, dir));
  std::ofstream(dir + "/w1.yaml") << "model: mlp\nmodel_config: {hidden: [256]}\ndataset: fashion_mnist\n"
                                     "optimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                                     "epochs: 1\nmax_steps: 150\nbatch_size: 64\nseed: 0\n";
  std::ofstream(dir + "/job.yaml") << "name: w1\nrecipe: " << dir << "/w1.yaml\nnproc: 1\nnnodes: 2\n"
                                      "inputs: {data_url: studio://data/fmnist}\noutput: studio://runs/w1\n"
                                      "env: {KILN_NUM_THREADS: '1'}\n";
  auto job = s.kiln(token, dir, "job submit " + dir + "/job.yaml --wait");
  ASSERT_EQ(job.first, 0) << job.second << text_of(dir + "/jobs/1/launcher.log");
  auto shown = s.kiln(token, dir, "job show 1");
  const size_t at_id = shown.second.find("slurm   job ");
  ASSERT_NE(at_id, std::string::npos) << shown.second;
  const std::string slurm_id = shown.second.substr(at_id + 12, shown.second.find('\n', at_id) - at_id - 12);
  EXPECT_EQ(slurm_field(slurm_id, "NodeList"), "n[1-2]");  // one rank on each node
  auto logs = s.kiln(token, dir, "job logs 1 --rank 0 --grep 'test accuracy'");
  const size_t at = logs.second.find("test accuracy ");
  ASSERT_NE(at, std::string::npos) << logs.second;
  EXPECT_GT(std::stod(logs.second.substr(at + 14)), 70.0) << logs.second;
}

// Several hosts, made on this machine as network namespaces joined by a veth
// link: ranks on two "hosts" train one recipe together, each host under its
// own kiln launch, to the parameters of one process; a host that never
// starts is named at init; a rank killed, or a link taken down, mid-training
// is reported naming the rank lost and its host, instead of hanging. Needs root (CI runs
// as root) and iproute2; skipped otherwise.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "kiln/data.h"
#include "kiln/launch.h"
#include "support/job_files.h"

using namespace kiln;
using namespace kiln::testing;
using namespace std::chrono_literals;

namespace {

int sh(const std::string& command) { return std::system(("bash -c '" + command + "' > /dev/null 2>&1").c_str()); }

// Two namespaces with a veth pair between them, removed with the object.
class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    if (!std::filesystem::exists(data::kFashionMnistDir)) GTEST_SKIP() << "Fashion-MNIST is missing";
    const std::string id = std::to_string(getpid() % 100000);
    a_ = "kiln_a" + id;
    b_ = "kiln_b" + id;
    link_a_ = "kva" + id;
    net_ = "10.211." + std::to_string(getpid() % 250) + ".";
    if (sh("ip netns add " + a_) != 0) GTEST_SKIP() << "ip netns is not available here";
    made_ = true;
    const std::string setup = "set -e; ip netns add " + b_ + "; ip link add " + link_a_ + " type veth peer name kvb" + id +
                              "; ip link set " + link_a_ + " netns " + a_ + "; ip link set kvb" + id + " netns " + b_ +
                              "; ip -n " + a_ + " addr add " + net_ + "1/24 dev " + link_a_ + "; ip -n " + b_ +
                              " addr add " + net_ + "2/24 dev kvb" + id + "; for n in " + a_ + " " + b_ +
                              "; do ip -n $n link set lo up; done; ip -n " + a_ + " link set " + link_a_ + " up; ip -n " +
                              b_ + " link set kvb" + id + " up";
    ASSERT_EQ(sh(setup), 0) << "could not build the two hosts";
    dir_ = fresh_dir("multihost");
  }
  void TearDown() override {
    if (!made_) return;
    sh("ip netns pids " + a_ + " | xargs -r kill -9; ip netns pids " + b_ + " | xargs -r kill -9");
    sh("ip netns del " + a_ + "; ip netns del " + b_);
    std::filesystem::remove_all(dir_);
  }
  std::string recipe(int64_t max_steps, double timeout_s) const {
    const std::string path = dir_ + "/w2.yaml";
    std::ofstream(path) << "model: cnn\ndataset: fashion_mnist\noptimizer: {name: sgd, lr: 0.01, momentum: 0.9}\n"
                           "epochs: 1\nmax_steps: " << max_steps << "\nbatch_size: 64\nthreads: 1\n"
                           "distributed: {timeout_s: " << timeout_s << "}\noutput: " << dir_ << "/out\n";
    return path;
  }
  // Waits until rank 0 has trained 100 steps.
  bool training(std::chrono::seconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (text_of(dir_ + "/logs-" + a_ + "/rank-0.log").find("step 100/") != std::string::npos) return true;
      std::this_thread::sleep_for(200ms);
    }
    return false;
  }
  std::string tail(const std::string& path) const {
    const std::string t = text_of(path);
    return t.substr(t.size() > 3000 ? t.size() - 3000 : 0);
  }
  // kiln launch on one host, in the background; its exit status goes to DIR/HOST.status.
  void launch_on(const std::string& host, int node_rank, int nproc, const std::string& recipe_path) const {
    const std::string kiln = KILN_CLI;
    const std::string command = "ip netns exec " + host + " " + kiln + " launch -n " + std::to_string(nproc) +
                                " --nnodes 2 --node-rank " + std::to_string(node_rank) + " --master " + net_ +
                                "1:29500 --log-dir " + dir_ + "/logs-" + host + " -- " + kiln + " train " +
                                recipe_path + " > " + dir_ + "/" + host + ".out 2>&1; echo $? > " + dir_ + "/" + host +
                                ".status";
    ASSERT_EQ(std::system(("(" + command + ") &").c_str()), 0);
  }
  // Waits for both launchers; false if one is still running at the deadline.
  bool both_done(std::chrono::seconds limit) const {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      if (std::filesystem::exists(dir_ + "/" + a_ + ".status") && std::filesystem::exists(dir_ + "/" + b_ + ".status"))
        return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  int status_of(const std::string& host) const { return std::stoi(text_of(dir_ + "/" + host + ".status")); }
  std::string a_, b_, link_a_, net_, dir_;
  bool made_ = false;
};

TEST_F(TwoHosts, TwoRanksOnEachHostTrainTogether) {
  const std::string r = recipe(30, 60);
  launch_on(a_, 0, 2, r);
  launch_on(b_, 1, 2, r);
  ASSERT_TRUE(both_done(180s)) << "the job did not finish";
  EXPECT_EQ(status_of(a_), 0) << text_of(dir_ + "/" + a_ + ".out");
  EXPECT_EQ(status_of(b_), 0) << text_of(dir_ + "/" + b_ + ".out");
  auto m = nlohmann::json::parse(text_of(dir_ + "/out/metrics.json"));
  EXPECT_EQ(m["ranks"], 4);
  EXPECT_EQ(m["steps"], 30);
  // Host b's ranks are 2 and 3, logged there with their rank.
  auto b_lines = dist::read_logs(dir_ + "/logs-" + b_, {3, "test accuracy"});
  EXPECT_EQ(b_lines.size(), 1u);
  // The same parameters as one process with the whole batch.
  const std::string kiln = KILN_CLI;
  ASSERT_EQ(std::system((kiln + " train " + r + " --output " + dir_ + "/alone > " + dir_ + "/alone.txt 2>&1").c_str()), 0);
  EXPECT_LT(largest_difference(dir_ + "/alone/checkpoint.safetensors", dir_ + "/out/checkpoint.safetensors"), 1e-4)
      << "4 ranks on 2 hosts went elsewhere than 1 rank";
}

TEST_F(TwoHosts, AHostThatNeverStartsIsNamedAtInit) {
  const std::string r = recipe(30, 4);
  launch_on(a_, 0, 1, r);  // host b never starts
  const auto start = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(dir_ + "/" + a_ + ".status") && std::chrono::steady_clock::now() - start < 60s)
    std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/" + a_ + ".status")) << "rank 0 waited forever";
  EXPECT_NE(status_of(a_), 0);
  const std::string log = tail(dir_ + "/logs-" + a_ + "/rank-0.log");
  EXPECT_NE(log.find("rank(s) 1 of 2 did not join within 4000 ms"), std::string::npos) << log;
}

TEST_F(TwoHosts, ARankKilledMidTrainingIsNamedByTheOtherHost) {
  const std::string r = recipe(100000, 10);
  launch_on(a_, 0, 1, r);
  launch_on(b_, 1, 1, r);
  ASSERT_TRUE(training(90s)) << text_of(dir_ + "/" + a_ + ".out");
  const auto killed = std::chrono::steady_clock::now();
  // The rank's own process on host b (not its launcher): kill -9, no word.
  const std::string kill_rank = "for p in $(ip netns pids " + b_ + "); do c=$(tr \"\\0\" \" \" < /proc/$p/cmdline); "
                                "case \"$c\" in *launch*) ;; *\" train \"*) kill -9 $p;; esac; done";
  ASSERT_EQ(sh(kill_rank), 0);
  ASSERT_TRUE(both_done(60s)) << "rank 0 hung after rank 1 died";
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 30s);
  EXPECT_NE(status_of(a_), 0);
  const std::string b_out = text_of(dir_ + "/" + b_ + ".out");
  EXPECT_NE(b_out.find("rank 1 (pid"), std::string::npos) << b_out;
  EXPECT_NE(b_out.find("was killed by signal 9"), std::string::npos) << b_out;
  const std::string a_log = tail(dir_ + "/logs-" + a_ + "/rank-0.log");
  EXPECT_NE(a_log.find("Rank 1 on "), std::string::npos) << a_log;
  EXPECT_NE(a_log.find("(" + net_ + "2) stopped answering"), std::string::npos) << a_log;
}

TEST_F(TwoHosts, ALinkTakenDownIsReportedByBothSidesNotHung) {
  const std::string r = recipe(100000, 4);
  launch_on(a_, 0, 1, r);
  launch_on(b_, 1, 1, r);
  ASSERT_TRUE(training(90s)) << text_of(dir_ + "/" + a_ + ".out");  // then cut the link
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_EQ(sh("ip -n " + a_ + " link set " + link_a_ + " down"), 0);
  ASSERT_TRUE(both_done(60s)) << "a rank hung after its link went down";
  EXPECT_LT(std::chrono::steady_clock::now() - cut, 45s);
  EXPECT_NE(status_of(a_), 0);
  EXPECT_NE(status_of(b_), 0);
  const std::string a_log = tail(dir_ + "/logs-" + a_ + "/rank-0.log");
  const std::string b_log = tail(dir_ + "/logs-" + b_ + "/rank-1.log");
  EXPECT_NE(a_log.find("Rank 1 on "), std::string::npos) << a_log;
  EXPECT_NE(a_log.find("(" + net_ + "2) stopped answering"), std::string::npos) << a_log;
  EXPECT_NE(b_log.find("Rank 0 on "), std::string::npos) << b_log;
  EXPECT_NE(b_log.find("rendezvous store it hosts is unreachable"), std::string::npos) << b_log;
}

}  // namespace

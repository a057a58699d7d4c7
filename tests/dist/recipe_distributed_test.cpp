// A recipe trained by several ranks through the command line: under kiln
// launch, and under Slurm's variables with no launcher (as srun starts it).
// Rank 0 writes the output; the job's metrics count every rank's samples.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/data.h"
#include "kiln/io.h"
#include "kiln/launch.h"
#include "support/ranks.h"

using namespace kiln;

namespace {

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/kiln_dist_recipe_" + name + "_" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// W2 for a few steps on Fashion-MNIST, one thread per rank.
std::string write_recipe(const std::string& dir, const std::string& mode = "eager", double lr = 0.05) {
  const std::string path = dir + "/w2.yaml";
  std::ofstream(path) << "model: cnn\ndataset: fashion_mnist\noptimizer: {name: sgd, lr: " << lr
                      << ", momentum: 0.9}\nepochs: 1\nmax_steps: 30\nbatch_size: 64\nthreads: 1\nmode: " << mode
                      << "\ndistributed: {timeout_s: 60}\noutput: " << dir << "/out\n";
  return path;
}

// Runs a shell command; its output goes to `log`, shown when it fails.
void run(const std::string& command, const std::string& log) {
  const int status = std::system((command + " > " + log + " 2>&1").c_str());
  std::stringstream out;
  out << std::ifstream(log).rdbuf();
  ASSERT_EQ(status, 0) << command << "\n" << out.str();
}

nlohmann::json metrics_of(const std::string& dir) {
  std::ifstream in(dir + "/out/metrics.json");
  EXPECT_TRUE(in.good()) << "rank 0 wrote no metrics.json";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json();
}

class RecipeDistributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(data::kFashionMnistDir))
      GTEST_SKIP() << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)";
  }
};

TEST_F(RecipeDistributed, TwoRanksTrainARecipeUnderKilnLaunch) {
  const std::string dir = fresh_dir("launch");
  const std::string recipe = write_recipe(dir, "graph");
  const std::string command = std::string(KILN_CLI) + " launch -n 2 --log-dir " + dir + "/logs -- " + KILN_CLI +
                              " train " + recipe + " > " + dir + "/terminal.txt 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << std::ifstream(dir + "/terminal.txt").rdbuf();
  auto m = metrics_of(dir);
  EXPECT_EQ(m["ranks"], 2);
  EXPECT_EQ(m["steps"], 30);
  EXPECT_GT(m["accuracy"].get<double>(), 0.5) << "30 steps of W2 learn more than that";
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/checkpoint.safetensors"));
  // Every rank has its log; the terminal shows each line with its rank.
  auto said_wrote = [&](int rank) {
    return !dist::read_logs(dir + "/logs", {rank, "^wrote "}).empty();
  };
  EXPECT_TRUE(said_wrote(0));
  EXPECT_FALSE(said_wrote(1)) << "rank 1 claimed to write the output";
  std::stringstream terminal;
  terminal << std::ifstream(dir + "/terminal.txt").rdbuf();
  EXPECT_NE(terminal.str().find("[rank 1] test accuracy"), std::string::npos) << terminal.str();
  // A global batch that does not split over the ranks is refused by name.
  const std::string three = std::string(KILN_CLI) + " launch -n 3 --log-dir " + dir + "/logs3 -- " + KILN_CLI +
                            " train " + recipe + " > " + dir + "/three.txt 2>&1";
  EXPECT_NE(std::system(three.c_str()), 0);
  std::stringstream refused;
  refused << std::ifstream(dir + "/three.txt").rdbuf();
  EXPECT_NE(refused.str().find("make it a multiple of 3"), std::string::npos) << refused.str();
  std::filesystem::remove_all(dir);
}

TEST_F(RecipeDistributed, SrunStartsTheRanksWithNoLauncher) {
  const std::string dir = fresh_dir("slurm");
  const std::string recipe = write_recipe(dir);
  // Slurm's job id gives the port: 20000 + id % 20000. Find one that is free.
  int job = 0;
  for (int tries = 0; tries < 50 && job == 0; ++tries) {
    const int port = kiln::testing::free_port();
    if (port >= 20000 && port < 40000) job = port - 20000 + 40000 * (tries + 1);
  }
  ASSERT_NE(job, 0);
  std::string both;
  for (int rank = 0; rank < 2; ++rank) {
    both += "env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=" + std::to_string(rank) +
            " SLURM_LOCALID=" + std::to_string(rank) + " SLURM_NTASKS=2 SLURM_TASKS_PER_NODE=2 "
            "SLURM_JOB_NODELIST=localhost SLURM_JOB_ID=" + std::to_string(job) + " " + KILN_CLI + " train " + recipe +
            " > " + dir + "/rank" + std::to_string(rank) + ".txt 2>&1 & p" + std::to_string(rank) + "=$!; ";
  }
  const std::string command = both + "wait $p0 && wait $p1";
  const int status = std::system(("bash -c '" + command + "'").c_str());
  std::stringstream out;
  out << std::ifstream(dir + "/rank0.txt").rdbuf() << std::ifstream(dir + "/rank1.txt").rdbuf();
  ASSERT_EQ(status, 0) << out.str();
  auto m = metrics_of(dir);
  EXPECT_EQ(m["ranks"], 2);
  EXPECT_EQ(m["steps"], 30);
  std::filesystem::remove_all(dir);
}

TEST_F(RecipeDistributed, ACheckpointOfTwoRanksResumesOnOne) {
  // 2 ranks to step 15, then 1 rank on to step 30, against 1 rank all the
  // way: the same global batches in the same order, the same parameters.
  const std::string dir = fresh_dir("resume");
  const std::string recipe = write_recipe(dir, "eager", 0.01);
  const std::string kiln = KILN_CLI;
  run(kiln + " launch -n 2 --log-dir " + dir + "/logs -- " + kiln + " train " + recipe + " --max-steps 15 --output " +
          dir + "/split",
      dir + "/first.txt");
  run(kiln + " train --resume " + dir + "/split --max-steps 30", dir + "/second.txt");
  run(kiln + " train " + recipe + " --output " + dir + "/whole", dir + "/whole.txt");
  io::MappedSafetensors split(dir + "/split/checkpoint.safetensors"), whole(dir + "/whole/checkpoint.safetensors");
  ASSERT_EQ(split.entries().size(), whole.entries().size());
  double worst = 0;
  for (const auto& e : whole.entries()) {
    const auto* other = split.find(e.name);
    ASSERT_NE(other, nullptr) << e.name;
    auto a = whole.tensor(e).to_vector<float>(), b = split.tensor(*other).to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::abs(a[i] - b[i])));
  }
  // The run must have learned something for the comparison to mean anything.
  std::stringstream whole_log;
  whole_log << std::ifstream(dir + "/whole/metrics.json").rdbuf();
  EXPECT_GT(nlohmann::json::parse(whole_log.str())["accuracy"].get<double>(), 0.3);  // chance: 0.1
  EXPECT_LT(worst, 1e-4) << "resumed on another rank count, the parameters went elsewhere";
  std::filesystem::remove_all(dir);
}

}  // namespace

// A recipe trained by several ranks through the command line: under kiln
// launch, and under Slurm's variables with no launcher (as srun starts it).
// Rank 0 writes the output; the job's metrics count every rank's samples.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/data.h"
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
std::string write_recipe(const std::string& dir, const std::string& mode = "eager") {
  const std::string path = dir + "/w2.yaml";
  std::ofstream(path) << "model: cnn\ndataset: fashion_mnist\noptimizer: {name: sgd, lr: 0.05, momentum: 0.9}\n"
                         "epochs: 1\nmax_steps: 30\nbatch_size: 64\nthreads: 1\nmode: "
                      << mode << "\ndistributed: {timeout_s: 60}\noutput: " << dir << "/out\n";
  return path;
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

}  // namespace

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
#include "support/job_files.h"
#include "support/ranks.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

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
  ASSERT_EQ(status, 0) << command << "\n" << text_of(log);
}

nlohmann::json metrics_of(const std::string& dir) {
  const std::string text = text_of(dir + "/out/metrics.json");
  EXPECT_FALSE(text.empty()) << "rank 0 wrote no metrics.json";
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

class RecipeDistributed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(data::kFashionMnistDir))
      GTEST_SKIP() << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (scripts/install-deps.sh does)";
  }
};

TEST_F(RecipeDistributed, TwoRanksTrainARecipeUnderKilnLaunch) {
  const std::string dir = fresh_dir("dist_recipe_launch");
  const std::string recipe = write_recipe(dir, "graph");
  const std::string command = std::string(KILN_CLI) + " launch -n 2 --log-dir " + dir + "/logs -- " + KILN_CLI +
                              " train " + recipe + " > " + dir + "/terminal.txt 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << text_of(dir + "/terminal.txt");
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
  const std::string terminal = text_of(dir + "/terminal.txt");
  EXPECT_NE(terminal.find("[rank 1] test accuracy"), std::string::npos) << terminal;
  // A global batch that does not split over the ranks is refused by name.
  const std::string three = std::string(KILN_CLI) + " launch -n 3 --log-dir " + dir + "/logs3 -- " + KILN_CLI +
                            " train " + recipe + " > " + dir + "/three.txt 2>&1";
  EXPECT_NE(std::system(three.c_str()), 0);
  const std::string refused = text_of(dir + "/three.txt");
  EXPECT_NE(refused.find("make it a multiple of 3"), std::string::npos) << refused;
  std::filesystem::remove_all(dir);
}

TEST_F(RecipeDistributed, SrunStartsTheRanksWithNoLauncher) {
  const std::string dir = fresh_dir("dist_recipe_slurm");
  const std::string recipe = write_recipe(dir);
  // Slurm's job id gives the port: 20000 + id % 20000. Find one that is free.
  int job = 0;
  for (int tries = 0; tries < 50 && job == 0; ++tries) {
    const int port = free_port();
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
  ASSERT_EQ(status, 0) << text_of(dir + "/rank0.txt") << text_of(dir + "/rank1.txt");
  auto m = metrics_of(dir);
  EXPECT_EQ(m["ranks"], 2);
  EXPECT_EQ(m["steps"], 30);
  std::filesystem::remove_all(dir);
}

TEST_F(RecipeDistributed, ACheckpointOfTwoRanksResumesOnOne) {
  // 2 ranks to step 15, then 1 rank on to step 30, against 1 rank all the
  // way: the same global batches in the same order, the same parameters.
  const std::string dir = fresh_dir("dist_recipe_resume");
  const std::string recipe = write_recipe(dir, "eager", 0.01);
  const std::string kiln = KILN_CLI;
  run(kiln + " launch -n 2 --log-dir " + dir + "/logs -- " + kiln + " train " + recipe + " --max-steps 15 --output " +
          dir + "/split",
      dir + "/first.txt");
  run(kiln + " train --resume " + dir + "/split --max-steps 30", dir + "/second.txt");
  run(kiln + " train " + recipe + " --output " + dir + "/whole", dir + "/whole.txt");
  // The run must have learned something for the comparison to mean anything.
  EXPECT_GT(nlohmann::json::parse(text_of(dir + "/whole/metrics.json"))["accuracy"].get<double>(), 0.3);  // chance: 0.1
  EXPECT_LT(largest_difference(dir + "/whole/checkpoint.safetensors", dir + "/split/checkpoint.safetensors"), 1e-4)
      << "resumed on another rank count, the parameters went elsewhere";
  std::filesystem::remove_all(dir);
}

}  // namespace

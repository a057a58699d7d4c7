#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "kiln/kiln.h"
#include "kiln/training_checkpoint.h"
#include "support/error_message.h"

using namespace kiln;
using kiln::testing::message_of;

namespace {
// A net with dropout, so that resuming must restore the generator too.
std::shared_ptr<nn::SequentialCell> net_with_dropout() {
  return std::make_shared<nn::SequentialCell>(
      std::vector<nn::CellPtr>{std::make_shared<nn::Dense>(4, 16), std::make_shared<nn::ReLU>(),
                               std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Dense>(16, 3)});
}

struct TrainingRun {
  std::shared_ptr<nn::SequentialCell> net = net_with_dropout();
  std::shared_ptr<optim::SGD> sgd =
      std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  train::Model model{net, std::make_shared<nn::CrossEntropyLoss>(), sgd};
  std::vector<double> losses;
  std::shared_ptr<train::LambdaCallback> recorder = std::make_shared<train::LambdaCallback>();
  TrainingRun() {
    model.set_adapt_threads(false);  // bit for bit: the same thread count every step
    recorder->step_end = [this](train::Model&, const train::StepInfo& s) { losses.push_back(s.loss); };
  }
};

data::TensorDataset dataset() {
  Generator g(11);
  return {randn({40, 4}, DType::Float32, &g), randint(0, 3, {40}, DType::Int64, &g)};
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_resume_" + name + "_" + std::to_string(::getpid()))).string();
}
}  // namespace

TEST(Resume, ContinuesWithTheSameLossesStepForStep) {
  auto schedule = std::make_shared<train::LearningRateScheduler>(optim::cosine_schedule(0.1, 20, 3));
  // 40 samples in batches of 8, shuffled: 5 steps an epoch, 4 epochs.
  manual_seed(3);
  TrainingRun straight;
  data::BatchIterator all(dataset(), 8, true, false, 5);
  straight.model.train(4, all, {schedule, straight.recorder});
  ASSERT_EQ(straight.losses.size(), 20u);

  for (int64_t stop_at : {10, 7}) {  // at an epoch boundary, and inside epoch 2
    std::string path = temp_path("ckpt") + std::to_string(stop_at);
    manual_seed(3);
    TrainingRun first;
    data::BatchIterator a(dataset(), 8, true, false, 5);
    first.model.train(4, a,
                      {schedule, first.recorder, std::make_shared<train::StopAtStep>(stop_at),
                       std::make_shared<train::TrainingCheckpoint>(path)});
    ASSERT_EQ(first.losses.size(), static_cast<size_t>(stop_at));

    manual_seed(99);  // a different process state: everything must come from the file
    TrainingRun second;
    data::BatchIterator b(dataset(), 8, true, false, 5);
    train::load_training_checkpoint(path, second.model);
    second.model.train(4, b, {schedule, second.recorder});
    std::vector<double> joined = first.losses;
    joined.insert(joined.end(), second.losses.begin(), second.losses.end());
    EXPECT_EQ(joined, straight.losses) << "resumed at step " << stop_at;
    auto p1 = straight.net->trainable_params(), p2 = second.net->trainable_params();
    for (size_t i = 0; i < p1.size(); ++i) EXPECT_EQ(p1[i].to_vector<float>(), p2[i].to_vector<float>());
    std::filesystem::remove(path);
  }
}

TEST(Resume, RefusesAWeightsOnlyFile) {
  TrainingRun r;
  std::string path = temp_path("weights");
  io::save_cell(*r.net, path);
  auto msg = message_of([&] { train::load_training_checkpoint(path, r.model); });
  EXPECT_NE(msg.find("is not a Kiln training checkpoint"), std::string::npos) << msg;
  std::filesystem::remove(path);
}

TEST(Resume, RefusesAnotherOptimizerNamingBothAndTheFile) {
  TrainingRun r;
  std::string path = temp_path("optimizer");
  train::save_training_checkpoint(path, r.model, {0, 1, 0});
  auto adam = std::make_shared<optim::Adam>(r.net->trainable_params(), optim::AdamOptions{});
  train::Model other(r.net, std::make_shared<nn::CrossEntropyLoss>(), adam);
  auto msg = message_of([&] { train::load_training_checkpoint(path, other); });
  EXPECT_NE(msg.find("'" + path + "' was written by training with SGD with momentum, but this run uses Adam"),
            std::string::npos)
      << msg;
  std::filesystem::remove(path);
}

TEST(Resume, AProcessKilledWhileSavingLeavesTheLastGoodCheckpoint) {
  std::string path = temp_path("kill");
  manual_seed(1);
  auto big = models::make_model("resnet18");  // 11M parameters: a save takes long enough to be interrupted
  io::save_cell(*big, path, {{"generation", "first"}});
  for (int attempt = 0; attempt < 3; ++attempt) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      for (;;) io::save_cell(*big, path, {{"generation", "child"}});  // saves until killed
    }
    ::usleep(static_cast<useconds_t>(30000 + 40000 * attempt));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    // Whatever the moment of the kill, the file is a whole checkpoint that loads.
    auto other = models::make_model("resnet18");
    EXPECT_NO_THROW(io::load_cell(*other, path));
  }
  for (auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
    if (e.path().filename().string().rfind("." + std::filesystem::path(path).filename().string() + ".tmp", 0) == 0)
      std::filesystem::remove(e.path());  // the killed writer's temporary files
  std::filesystem::remove(path);
}

TEST(Resume, CallbackStateTravelsWithTheCheckpoint) {
  std::string path = temp_path("callbacks");
  manual_seed(4);
  TrainingRun first;
  data::BatchIterator a(dataset(), 8, true, false, 5);
  auto stopping = std::make_shared<train::EarlyStopping>("loss", 5);
  auto plateau = std::make_shared<train::ReduceLROnPlateau>("loss", 0.5, 1);
  first.model.train(
      3, a,
      {stopping, plateau,
       std::make_shared<train::TrainingCheckpoint>(path, 0, std::map<std::string, std::string>{},
                                                   std::vector<std::shared_ptr<train::Callback>>{stopping, plateau})});
  TrainingRun second;
  auto stopping2 = std::make_shared<train::EarlyStopping>("loss", 5);
  auto plateau2 = std::make_shared<train::ReduceLROnPlateau>("loss", 0.5, 1);
  train::load_training_checkpoint(path, second.model, {stopping2, plateau2});
  EXPECT_EQ(stopping2->state(), stopping->state());
  EXPECT_EQ(plateau2->state(), plateau->state());
  EXPECT_NE(stopping->state().at("best"), "inf");
  EXPECT_DOUBLE_EQ(second.sgd->lr(), first.sgd->lr());
  std::filesystem::remove(path);
}

#include <map>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"
#include "kiln/profiler.h"

using namespace kiln;

TEST(Profiler, RecordsOnlyWhileOn) {
  Tensor a = ones({4});
  profiler::start();
  add(a, a);
  profiler::stop();
  add(a, a);  // after stop: not recorded
  mul(a, a);
  std::vector<std::string> names;
  for (auto& r : profiler::records()) names.push_back(r.name);
  EXPECT_EQ(names, std::vector<std::string>{"add"});
  profiler::start();  // a new session starts empty
  profiler::stop();
  EXPECT_TRUE(profiler::records().empty());
}

TEST(Profiler, RecordsOpsWithTypeShapesAndBytes) {
  Tensor a = ones({2, 3}), b = ones({3, 4});
  {
    profiler::Scope scope;
    Tensor c = matmul(a, b);
    add(c, c);
  }
  // Two ops, two records: kernels never run ops themselves (matmul's kernel
  // broadcasts and transposes its operands without dispatching views).
  std::vector<profiler::Record> recs = profiler::records();
  ASSERT_EQ(recs.size(), 2u);
  EXPECT_EQ(recs[0].name, "matmul");
  EXPECT_EQ(recs[0].type, "matmul");
  EXPECT_EQ(recs[0].backend, "cpu");
  EXPECT_EQ(recs[0].shapes, "float32[2, 3], float32[3, 4]");
  EXPECT_EQ(recs[0].bytes, (6 + 12 + 8) * 4);
  EXPECT_EQ(recs[1].type, "elementwise");
  EXPECT_GE(recs[1].start_ns, recs[0].start_ns + recs[0].duration_ns);
  EXPECT_FALSE(recs[0].fallback);
  std::string s = profiler::summary();
  EXPECT_NE(s.find("ops by total time"), std::string::npos) << s;
  EXPECT_NE(s.find("matmul"), std::string::npos) << s;
  EXPECT_NE(s.find("op types by total time"), std::string::npos) << s;
}

// Op types come from each op's definition, gradients marked as such.
TEST(Profiler, OpTypesComeFromTheOpDefinitions) {
  Tensor x = ones({1, 2, 6, 6}), w = ones({3, 2, 3, 3});
  x.set_requires_grad(true);
  {
    profiler::Scope scope;
    Tensor y = max_pool2d(conv2d(x, w), {2, 2});
    sum(layer_norm(y, {2})).backward();
  }
  std::map<std::string, std::string> type_of;
  for (auto& r : profiler::records()) type_of[r.name] = r.type;
  EXPECT_EQ(type_of["conv2d"], "convolution");
  EXPECT_EQ(type_of["conv2d_input_grad"], "convolution backward");
  EXPECT_EQ(type_of["max_pool2d"], "pooling");
  EXPECT_EQ(type_of["max_pool2d_backward"], "pooling backward");
  EXPECT_EQ(type_of["layer_norm"], "normalization");
  EXPECT_EQ(type_of["sum"], "reduction");
}

TEST(Profiler, TrainingStepsShowDataWaitAndTheTraceOpensAsJson) {
  manual_seed(1);
  auto net = std::make_shared<nn::Dense>(4, 2);
  train::Model model(net, std::make_shared<nn::CrossEntropyLoss>(),
                     std::make_shared<optim::SGD>(net->trainable_params(), optim::SGDOptions{.lr = 0.1}));
  data::BatchIterator batches(data::TensorDataset(randn({32, 4}), randint(0, 2, {32})), 8, true);
  {
    profiler::Scope scope;
    model.train(1, batches);
  }
  std::string s = profiler::summary();
  EXPECT_NE(s.find("\nstep "), std::string::npos) << s;
  EXPECT_NE(s.find("\ndata "), std::string::npos) << s;
  EXPECT_NE(s.find("waiting for data:"), std::string::npos) << s;
  auto dir = std::filesystem::temp_directory_path() / ("kiln_profile_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  profiler::write_chrome_trace((dir / "trace.json").string());
  auto trace = nlohmann::json::parse(std::ifstream(dir / "trace.json"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  int steps = 0, linears = 0;
  for (auto& e : trace["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    steps += e["name"] == "step";
    linears += e["name"] == "linear";
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(linears, 4);
  profiler::write_html_report((dir / "report.html").string());
  std::ifstream html(dir / "report.html");
  std::string page((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<h2>Top ops by total time</h2>"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// kiln serve with a MindIR model in its repository (<model>/<version>/model.mindir),
// queried over the Open Inference Protocol, answering as NumPy does.
#ifdef KILN_WITH_SERVE
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "kiln/io.h"
#include "support/serve_fixture.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;
using kiln::testing::json;

TEST(MindirServing, AnswersOverTheInferenceProtocol) {
  const char* fixtures = std::getenv("KILN_MINDSPORE_FIXTURES");
  ASSERT_NE(fixtures, nullptr);
  const fs::path repo = kiln::testing::scratch_dir("mindir_repository");
  fs::create_directories(repo / "lenet" / "1");
  fs::copy_file(fs::path(fixtures) / "lenet.mindir", repo / "lenet" / "1" / "model.mindir",
                fs::copy_options::overwrite_existing);
  ServeOptions o;
  o.model_repository = repo.string();
  kiln::testing::Running running(o);
  const Tensor x = io::load_npy(std::string(fixtures) + "/lenet.input0.npy");
  json body = {{"inputs", {{{"name", "x"}, {"shape", x.shape()}, {"datatype", "FP32"}, {"data", x.to_vector<float>()}}}}};
  auto reply = running.client().Post("/v2/models/lenet/infer", body.dump(), "application/json");
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->status, 200) << reply->body;
  const Tensor y = kiln::testing::output_of(reply->body);
  const Tensor want = io::load_npy(std::string(fixtures) + "/lenet.output0.npy");
  ASSERT_EQ(y.shape(), want.shape());
  auto a = y.to_vector<float>(), b = want.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::abs(b[i])));
}

}  // namespace
#endif

// The runtime on CUDA: every committed PyTorch export (tests/fixtures/onnx)
// run by an InferenceSession on the GPU against PyTorch's outputs, traced
// and compiled, at optimization levels 1 and 2; nothing falls back to the
// CPU (the recurrent layers are traced as their decomposition for the GPU).
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/gpus.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"

namespace kiln {
namespace {

std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/" + name; }

class OnnxOnCuda : public ::testing::TestWithParam<const char*> {};

TEST_P(OnnxOnCuda, MatchesPyTorch) {
  NEEDS_A_GPU();
  const std::string name = GetParam();
  const Tensor x = io::load_npy(fixture(name + ".input.npy"));
  const auto want = io::load_npy(fixture(name + ".output.npy")).to(DType::Float64).to_vector<double>();
  for (int level : {1, 2}) {  // (level 0 interprets on the CPU only)
    SessionOptions o;
    o.optimization_level = level;
    o.device = "cuda";
    InferenceSession session(fixture(name + ".onnx"), o);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the traced run, then the compiled graph
      const int64_t before = fallback_count();
      const auto out = session.run({x});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].device().type, DeviceType::CUDA) << name;
      // (LSTM and GRU layers too: traced as their decomposition for the GPU.)
      EXPECT_EQ(fallback_count(), before) << name << " at level " << level << ": nodes ran on the CPU";
      const auto got = out[0].to(cpu_device()).to(DType::Float64).to_vector<double>();
      ASSERT_EQ(got.size(), want.size()) << name;
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-4 * std::max(1.0, std::fabs(want[i])))
            << name << " at level " << level << ", run " << repeat << ", element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, OnnxOnCuda,
                         ::testing::Values("mlp", "cnn", "resnet18", "mobilenet_v2", "transformer_encoder", "gpt_block",
                                           "unet", "text_lstm", "text_gru", "shufflenet_v2", "squeezenet",
                                           "mobilenet_v3"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln

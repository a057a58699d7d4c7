// The example op package's CUDA kernels (examples/custom_op, built with
// -DCUSTOM_OPS_CUDA=ON where Kiln's CUDA backend is): rms_norm and swiglu
// run on the GPU, on the stream Kiln gives them, with the CPU kernels'
// values, and rms_norm's gradient (written with Kiln ops) follows them
// there. Skipped without a GPU, or without the package (KILN_TEST_CUSTOM_OPS
// names it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "cuda/gpus.h"
#include "kiln/kiln.h"
#include "kiln/op_library.h"

namespace kiln {
namespace {

Device cuda() { return parse_device("cuda"); }

void expect_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  ASSERT_EQ(gpu.device(), cuda()) << what;
  const auto g = gpu.to(cpu_device()).to(DType::Float64).to_vector<double>();
  const auto c = cpu.to(DType::Float64).to_vector<double>();
  ASSERT_EQ(g.size(), c.size()) << what;
  for (size_t i = 0; i < c.size(); ++i)
    ASSERT_NEAR(g[i], c[i], tol * std::max(1.0, std::fabs(c[i]))) << what << " " << i;
}

TEST(CudaOpPackage, KernelsRunOnTheGpuWithTheCpusValues) {
  NEEDS_A_GPU();
  const char* package = std::getenv("KILN_TEST_CUSTOM_OPS");
  if (package == nullptr || *package == '\0') GTEST_SKIP() << "KILN_TEST_CUSTOM_OPS names no op package";
  load_op_library(package);
  ASSERT_FALSE(OpRegistry::instance().get("rms_norm").dtypes(DeviceType::CUDA).empty())
      << package << " was built without its CUDA kernels (-DCUSTOM_OPS_CUDA=ON)";
  manual_seed(14);
  const Attrs eps{{"eps", 1e-6}};
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor x = randn({37, 300}).to(dtype), w = randn({300}).to(dtype), up = randn({37, 300}).to(dtype);
    const int64_t before = fallback_count();
    const Tensor y = call("rms_norm", {x.to(cuda()), w.to(cuda())}, eps)[0];
    const Tensor s = call("swiglu", {x.to(cuda()), up.to(cuda())})[0];
    EXPECT_EQ(fallback_count(), before) << "the package's ops left the GPU";
    expect_close(y, call("rms_norm", {x, w}, eps)[0], 1e-5, "rms_norm");
    expect_close(s, call("swiglu", {x, up})[0], 1e-5, "swiglu");
  }
  Tensor xc = randn({8, 64}).set_requires_grad(true), wc = randn({64}).set_requires_grad(true);
  Tensor xg = xc.detach().to(cuda()).set_requires_grad(true), wg = wc.detach().to(cuda()).set_requires_grad(true);
  sum(call("rms_norm", {xc, wc}, eps)[0] * 2.0).backward();
  sum(call("rms_norm", {xg, wg}, eps)[0] * 2.0).backward();
  expect_close(xg.grad(), xc.grad(), 1e-4, "rms_norm's input gradient");
  expect_close(wg.grad(), wc.grad(), 1e-4, "rms_norm's weight gradient");
}

}  // namespace
}  // namespace kiln

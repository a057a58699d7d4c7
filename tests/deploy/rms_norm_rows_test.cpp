// The CPU pass that computes an RMS norm written as ops as one kernel
// (rms_norm_rows.cpp): ONNX Runtime's SimplifiedLayerNormalization, and the
// form PyTorch exports (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul);
// compiled, each is one kernel and gives the ops' results. A mean over
// another axis, or one read elsewhere too, stays as ops.
#include <gtest/gtest.h>

#include <algorithm>

#include "kiln/kiln.h"
#include "kiln/profiler.h"
#include "kiln/runtime.h"
#include "support/close.h"
#include "support/onnx_builder.h"

namespace kt = kiln::testing;
using namespace kiln;
using ::onnx::TensorProto;

namespace {

Tensor scalar(float v) { return from_vector<float>({v}, {}); }

// The kernels a compiled session ran x on (its second run), its outputs
// checked against the ops one by one (optimization level 1).
std::vector<std::string> kernels_checked_against_ops(InferenceSession& reference, InferenceSession& session,
                                                     const Tensor& x) {
  const auto want = reference.run({x});
  session.run({x});
  profiler::start();
  const auto got = session.run({x});
  profiler::stop();
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "output " << i);
    EXPECT_TRUE(kt::all_close(got[i], want[i], 1e-5, 1e-6));
  }
  std::vector<std::string> names;
  for (const auto& r : profiler::records()) names.push_back(r.name);
  return names;
}

SessionOptions op_by_op() {
  SessionOptions o;
  o.optimization_level = 1;
  return o;
}

TEST(RmsNormRows, NormsWrittenAsOpsRunAsOneKernelEach) {
  kt::OnnxBuilder b;
  b.io(true, "x", TensorProto::FLOAT, {2, -1, 40});
  manual_seed(3);
  b.init("w", rand({40}) + 0.5);
  b.init("two", scalar(2.0f));
  b.init("eps", scalar(1e-6f));
  b.init("last", from_vector<int64_t>({-1}, {1}));
  // ONNX Runtime's op (onnxruntime-genai's and optimum's exports).
  auto* simplified = b.node("SimplifiedLayerNormalization", {"x", "w"}, {"a"});
  kt::OnnxBuilder::integer(simplified, "axis", -1);
  kt::OnnxBuilder::real(simplified, "epsilon", 1e-5f);
  // What torch.onnx.export writes for x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.
  b.node("Pow", {"x", "two"}, {"squares"});
  auto* mean = b.node("ReduceMean", {"squares"}, {"mean"});
  kt::OnnxBuilder::ints(mean, "axes", {-1});
  b.node("Add", {"mean", "eps"}, {"variance"});
  b.node("Sqrt", {"variance"}, {"root"});
  b.node("Reciprocal", {"root"}, {"inverse"});
  b.node("Mul", {"x", "inverse"}, {"normed"});
  b.node("Mul", {"w", "normed"}, {"c"});
  // Over the middle axis: not a norm of rows.
  b.node("Add", {"x", "eps"}, {"shifted"});
  b.node("Mul", {"shifted", "shifted"}, {"squares2"});
  auto* across = b.node("ReduceMean", {"squares2"}, {"mean2"});
  kt::OnnxBuilder::ints(across, "axes", {1});
  b.node("Add", {"mean2", "eps"}, {"variance2"});
  b.node("Sqrt", {"variance2"}, {"root2"});
  b.node("Div", {"shifted", "root2"}, {"d"});
  b.io(false, "a", TensorProto::FLOAT, {2, -1, 40});
  b.io(false, "c", TensorProto::FLOAT, {2, -1, 40});
  b.io(false, "d", TensorProto::FLOAT, {2, -1, 40});
  const std::string path = b.save("rms_norm_rows.onnx");

  InferenceSession reference(path, op_by_op()), session(path);
  for (int64_t length : {5, 9, 1}) {  // one compiled graph for other lengths too
    SCOPED_TRACE(::testing::Message() << "length " << length);
    manual_seed(4 + length);
    const std::vector<std::string> kernels =
        kernels_checked_against_ops(reference, session, randn({2, length, 40}) * 3.0 + 0.5);
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "rms_norm"), 2) << ::testing::PrintToString(kernels);
    EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "mean"), 1) << ::testing::PrintToString(kernels);
  }
}

// The mean of squares is also an output: the ops stay, and give the same results.
TEST(RmsNormRows, ANormWhosePartsAreReadElsewhereStaysAsOps) {
  kt::OnnxBuilder b;
  b.io(true, "x", TensorProto::FLOAT, {3, 16});
  b.init("eps", scalar(1e-5f));
  b.node("Mul", {"x", "x"}, {"squares"});
  auto* mean = b.node("ReduceMean", {"squares"}, {"mean"});
  kt::OnnxBuilder::ints(mean, "axes", {-1});
  b.node("Add", {"mean", "eps"}, {"variance"});
  b.node("Sqrt", {"variance"}, {"root"});
  b.node("Reciprocal", {"root"}, {"inverse"});
  b.node("Mul", {"x", "inverse"}, {"y"});
  b.io(false, "y", TensorProto::FLOAT, {3, 16});
  b.io(false, "mean", TensorProto::FLOAT, {3, 1});
  const std::string path = b.save("rms_norm_read_elsewhere.onnx");
  InferenceSession reference(path, op_by_op()), session(path);
  const std::vector<std::string> kernels = kernels_checked_against_ops(reference, session, randn({3, 16}));
  EXPECT_EQ(std::count(kernels.begin(), kernels.end(), "rms_norm"), 0) << ::testing::PrintToString(kernels);
}

}  // namespace

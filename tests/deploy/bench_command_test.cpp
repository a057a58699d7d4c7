// `kiln bench` on a model with a dynamic sequence axis, as a user runs it:
// shapes given with --shape, a range of lengths timed in turn, and the
// mistakes named.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>
#include <string>

#include "support/cli_command.h"
#include "support/scratch.h"

namespace {

// y = relu(x) over x [batch, seq], both axes symbolic.
std::string dynamic_model(const std::filesystem::path& dir) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  for (auto* v : {g->add_input(), g->add_output()}) {
    v->set_name(v == &g->input(0) ? "tokens" : "y");
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(::onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("batch");
    t->mutable_shape()->add_dim()->set_dim_param("seq");
  }
  auto* n = g->add_node();
  n->set_op_type("Relu");
  n->add_input(std::string("tokens"));
  n->add_output(std::string("y"));
  std::string path = dir.string();
  path += "/dynamic.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

std::pair<int, std::string> bench(const std::string& args) { return kiln::testing::run_kiln("bench " + args); }

TEST(BenchCommand, TimesGivenShapesAndARangeOfLengthsInTurn) {
  const std::string model = dynamic_model(kiln::testing::scratch_dir("bench_shapes"));
  auto [rc, out] = bench(model + " --shape tokens=1x37 --runs 3");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tokens=1x37 "), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1x20..29 --runs 2");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tokens=1x20..29"), std::string::npos) << out;
  // Without a shape, the message says how to give one.
  std::tie(rc, out) = bench(model + " --runs 1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("give it with --shape tokens=DIMS"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape words=1x3");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("the model has no input 'words'; its inputs: tokens"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1x3x4");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("has 3 axes"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1xten");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("'ten' is not a size"), std::string::npos) << out;
}

// --bucket pads the lengths up to a few sizes; the mistakes are named.
TEST(BenchCommand, BucketsPadTheLengthsAndTheMistakesAreNamed) {
  const std::string model = dynamic_model(kiln::testing::scratch_dir("bench_buckets"));
  auto [rc, out] = bench(model + " --shape tokens=1x20..29 --runs 2 --bucket tokens:1=24,32");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("tokens=1x20..29"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1x20..29 --runs 2 --bucket tokens:1=24");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("has size 25, past its largest bucket (24)"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1x20 --bucket words:1=24");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("buckets name input 'words', which the model lacks; its inputs are tokens"), std::string::npos) << out;
  std::tie(rc, out) = bench(model + " --shape tokens=1x20 --bucket tokens=24");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("write NAME:AXIS=S1,S2,..."), std::string::npos) << out;
}

}  // namespace

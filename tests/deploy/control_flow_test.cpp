// ONNX If, Loop and Scan through the runtime: compiled when their conditions
// and trip counts are fixed for a graph, node by node when they depend on the
// inputs' values; subgraphs reading values of the graphs around them.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "support/close.h"
#include "support/error_message.h"

namespace kt = kiln::testing;
using namespace kiln;

namespace {

using ::onnx::TensorProto;

void typed(::onnx::ValueInfoProto* v, const std::string& name, int elem, std::vector<int64_t> shape) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* s = t->mutable_shape();
  for (int64_t d : shape) d >= 0 ? s->add_dim()->set_dim_value(d) : void(s->add_dim()->set_dim_param("n"));
}

::onnx::NodeProto* node(::onnx::GraphProto* g, const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out, const std::string& name = "") {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name.empty() ? op + "_" + std::to_string(g->node_size()) : name);
  for (auto& i : in) n->add_input(i);
  for (auto& o : out) n->add_output(o);
  return n;
}

void int_attr(::onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

::onnx::GraphProto* graph_attr(::onnx::NodeProto* n, const std::string& name) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name(name);
  return a->mutable_g();
}

// A scalar constant node in `g`, float32 unless `elem` says int64 or bool.
void constant(::onnx::GraphProto* g, const std::string& name, float value, int elem = TensorProto::FLOAT) {
  auto* n = node(g, "Constant", {}, {name});
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(elem);
  if (elem == TensorProto::INT64) t->add_int64_data(static_cast<int64_t>(value));
  else if (elem == TensorProto::BOOL) t->add_int32_data(value != 0);
  else t->add_float_data(value);
}

::onnx::ModelProto model() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  return m;
}

InferenceSession session_of(const ::onnx::ModelProto& m, int level = 2) {
  SessionOptions o;
  o.optimization_level = level;
  return InferenceSession::from_bytes(m.SerializeAsString(), o, "control_flow.onnx");
}

// y = sum(x) > 0 ? x * 2 : x - 1, the branches reading x from the main graph:
// the condition depends on x's values, so the session runs it node by node.
::onnx::ModelProto branch_on_data() {
  auto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "x", TensorProto::FLOAT, {-1, 3});
  constant(g, "zero", 0);
  node(g, "ReduceSum", {"x"}, {"total"});
  node(g, "Greater", {"total", "zero"}, {"positive"});
  auto* branch = node(g, "If", {"positive"}, {"y"}, "choose");
  auto* then = graph_attr(branch, "then_branch");
  constant(then, "two", 2);
  node(then, "Mul", {"x", "two"}, {"doubled"});
  typed(then->add_output(), "doubled", TensorProto::FLOAT, {-1, 3});
  auto* other = graph_attr(branch, "else_branch");
  constant(other, "one", 1);
  node(other, "Sub", {"x", "one"}, {"lowered"});
  typed(other->add_output(), "lowered", TensorProto::FLOAT, {-1, 3});
  typed(g->add_output(), "y", TensorProto::FLOAT, {-1, 3});
  return m;
}

TEST(OnnxControlFlow, IfOnComputedConditionRunsNodeByNodeAndTakesEachBranch) {
  for (int level : {0, 2}) {
    InferenceSession session = session_of(branch_on_data(), level);
    Tensor up = from_vector<float>({1, 2, 3, -1, 0, 1}, {2, 3}), down = -up;
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(kt::all_close(session.run({up})[0], up * 2.0, 0, 0)) << "level " << level;
    EXPECT_TRUE(kt::all_close(session.run({down})[0], down - 1.0, 0, 0)) << "level " << level;
    EXPECT_TRUE(kt::all_close(session.run({up})[0], up * 2.0, 0, 0)) << "level " << level;
    std::string log = ::testing::internal::GetCapturedStderr();
    if (level == 2) {  // said once, naming the node
      EXPECT_NE(log.find("node 'choose' (If, opset 17): the condition is computed from the inputs' values"),
                std::string::npos) << log;
      EXPECT_EQ(log.find("node by node"), log.rfind("node by node")) << log;
    }
  }
}

// The If's condition is a graph input: the session compiles one graph per
// value of it (an input bound by value), each with one branch in it.
TEST(OnnxControlFlow, IfOnInputConditionCompilesPerValue) {
  auto m = branch_on_data();
  auto* g = m.mutable_graph();
  g->mutable_node()->DeleteSubrange(0, 3);  // the condition comes in instead
  typed(g->add_input(), "positive", TensorProto::BOOL, {});
  InferenceSession session = session_of(m);
  Tensor x = randn({4, 3});
  EXPECT_TRUE(kt::all_close(session.run(std::vector<Tensor>{x, scalar_tensor(1, DType::Bool)})[0], x * 2.0, 0, 0));
  EXPECT_TRUE(kt::all_close(session.run(std::vector<Tensor>{x, scalar_tensor(0, DType::Bool)})[0], x - 1.0, 0, 0));
}

// A while loop: x doubles until its sum passes a limit, counting the trips;
// each trip's sum is a scan output.
::onnx::ModelProto double_until(float limit) {
  auto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "x", TensorProto::FLOAT, {3});
  constant(g, "limit", limit);
  node(g, "ReduceSum", {"x"}, {"start_total"});
  node(g, "Less", {"start_total", "limit"}, {"go"});
  auto* loop = node(g, "Loop", {"", "go", "x"}, {"final", "totals"}, "grow");
  auto* body = graph_attr(loop, "body");
  typed(body->add_input(), "i", TensorProto::INT64, {});
  typed(body->add_input(), "cond_in", TensorProto::BOOL, {});
  typed(body->add_input(), "x_in", TensorProto::FLOAT, {3});
  constant(body, "two", 2);
  node(body, "Mul", {"x_in", "two"}, {"x_out"});
  node(body, "ReduceSum", {"x_out"}, {"total"});
  node(body, "Less", {"total", "limit"}, {"cond_out"});  // `limit` from the main graph
  typed(body->add_output(), "cond_out", TensorProto::BOOL, {});
  typed(body->add_output(), "x_out", TensorProto::FLOAT, {3});
  typed(body->add_output(), "total", TensorProto::FLOAT, {});
  typed(g->add_output(), "final", TensorProto::FLOAT, {3});
  typed(g->add_output(), "totals", TensorProto::FLOAT, {-1});
  return m;
}

TEST(OnnxControlFlow, WhileLoopStopsOnItsComputedCondition) {
  InferenceSession session = session_of(double_until(100));
  auto out = session.run({from_vector<float>({1, 2, 3}, {3})});  // sums 12, 24, 48, 96, 192
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{32, 64, 96}));
  EXPECT_EQ(out[1].to_vector<float>(), (std::vector<float>{12, 24, 48, 96, 192}));
  // Already past the limit: no trip, the value unchanged, no totals.
  out = session.run({from_vector<float>({50, 50, 50}, {3})});
  EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{50, 50, 50}));
  EXPECT_EQ(out[1].shape(), (Shape{0}));
}

// A counted loop nested in nothing but reading the iteration number, with an
// If inside its body whose condition is a constant: the whole thing unrolls
// into one compiled graph, and the answer matches the node-by-node run.
TEST(OnnxControlFlow, CountedLoopWithConstantBranchCompilesAndMatchesEager) {
  auto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "x", TensorProto::FLOAT, {2, 2});
  constant(g, "trips", 4, TensorProto::INT64);
  auto* loop = node(g, "Loop", {"trips", "", "x"}, {"y"}, "accumulate");
  auto* body = graph_attr(loop, "body");
  typed(body->add_input(), "i", TensorProto::INT64, {});
  typed(body->add_input(), "c", TensorProto::BOOL, {});
  typed(body->add_input(), "acc", TensorProto::FLOAT, {2, 2});
  node(body, "Cast", {"i"}, {"fi"})->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto to;
    to.set_name("to");
    to.set_type(::onnx::AttributeProto::INT);
    to.set_i(TensorProto::FLOAT);
    return to;
  }());
  constant(body, "always", 1, TensorProto::BOOL);
  auto* inner = node(body, "If", {"always"}, {"step"});
  auto* then = graph_attr(inner, "then_branch");
  node(then, "Mul", {"x", "fi"}, {"scaled"});  // x from two graphs out, fi from the body
  typed(then->add_output(), "scaled", TensorProto::FLOAT, {2, 2});
  auto* other = graph_attr(inner, "else_branch");
  node(other, "Neg", {"x"}, {"negated"});
  typed(other->add_output(), "negated", TensorProto::FLOAT, {2, 2});
  node(body, "Add", {"acc", "step"}, {"acc_out"});
  node(body, "Identity", {"c"}, {"c_out"});
  typed(body->add_output(), "c_out", TensorProto::BOOL, {});
  typed(body->add_output(), "acc_out", TensorProto::FLOAT, {2, 2});
  typed(g->add_output(), "y", TensorProto::FLOAT, {2, 2});
  Tensor x = randn({2, 2});
  Tensor want = x * 7.0;  // x + 0x + 1x + 2x + 3x
  EXPECT_TRUE(kt::all_close(session_of(m, 0).run({x})[0], want, 1e-6, 1e-6));
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(kt::all_close(session_of(m, 2).run({x})[0], want, 1e-6, 1e-6));
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("node by node"), std::string::npos) << log;
}

// Scan: a running sum over axis 1, backwards, with the running values as a
// scan output along axis 1 (compiled: the trip count is a shape).
TEST(OnnxControlFlow, ScanRunsAlongItsAxesAndDirections) {
  auto m = model();
  auto* g = m.mutable_graph();
  typed(g->add_input(), "init", TensorProto::FLOAT, {2});
  typed(g->add_input(), "seq", TensorProto::FLOAT, {2, 5});
  auto* scan = node(g, "Scan", {"init", "seq"}, {"total", "running"}, "cumulate");
  int_attr(scan, "num_scan_inputs", 1);
  for (const char* name : {"scan_input_axes", "scan_input_directions", "scan_output_axes"}) {
    auto* a = scan->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    a->add_ints(1);
  }
  auto* body = graph_attr(scan, "body");
  typed(body->add_input(), "sum_in", TensorProto::FLOAT, {2});
  typed(body->add_input(), "column", TensorProto::FLOAT, {2});
  node(body, "Add", {"sum_in", "column"}, {"sum_out"});
  node(body, "Identity", {"sum_out"}, {"scanned"});
  typed(body->add_output(), "sum_out", TensorProto::FLOAT, {2});
  typed(body->add_output(), "scanned", TensorProto::FLOAT, {2});
  typed(g->add_output(), "total", TensorProto::FLOAT, {2});
  typed(g->add_output(), "running", TensorProto::FLOAT, {2, 5});
  Tensor init = from_vector<float>({100, 200}, {2});
  Tensor seq = from_vector<float>({1, 2, 3, 4, 5, 10, 20, 30, 40, 50}, {2, 5});
  for (int level : {0, 2}) {
    auto out = session_of(m, level).run(std::vector<Tensor>{init, seq});
    EXPECT_EQ(out[0].to_vector<float>(), (std::vector<float>{115, 350})) << level;
    // Read from the end; the running values written at positions 0, 1, ...
    EXPECT_EQ(out[1].contiguous().to_vector<float>(),
              (std::vector<float>{105, 109, 112, 114, 115, 250, 290, 320, 340, 350}))
        << level;
  }
}

TEST(OnnxControlFlow, BadGraphsAreRefusedWithTheReason) {
  // An op Kiln lacks inside a branch is listed at load, like one at the top.
  auto m = branch_on_data();
  auto* then = m.mutable_graph()->mutable_node(3)->mutable_attribute(0)->mutable_g();
  node(then, "Det", {"x"}, {"d"}, "det_in_branch");
  std::string msg = kt::message_of([&] { session_of(m); });
  EXPECT_NE(msg.find("Det (opset 17): 1 node(s): det_in_branch"), std::string::npos) << msg;
  // A loop with neither a trip count nor a condition would never stop.
  auto forever = double_until(100);
  forever.mutable_graph()->mutable_node(3)->set_input(1, "");
  msg = kt::message_of([&] { session_of(forever, 0).run({ones({3})}); });
  EXPECT_NE(msg.find("never stop"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'grow'"), std::string::npos) << msg;
  // A branch reading a value that nothing defines.
  auto dangling = branch_on_data();
  dangling.mutable_graph()->mutable_node(3)->mutable_attribute(1)->mutable_g()->mutable_node(1)->set_input(0, "ghost");
  msg = kt::message_of([&] { session_of(dangling); });
  EXPECT_NE(msg.find("'ghost'"), std::string::npos) << msg;
}

}  // namespace

// ONNX LSTM, GRU and RNN nodes with what the fused recurrent ops do not take
// (per-sequence lengths shorter than the batch's, LSTM peepholes), run as a
// loop of Kiln ops: checked against ONNX Runtime on the same files, both
// directions (ONNX Runtime has no batch-first recurrent ops; the layouts are
// the fused path's, tested with it).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <fstream>

#include "io/onnx_tensor.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "support/close.h"
#include "support/ort_reference.h"
#include "support/scratch.h"

namespace kt = kiln::testing;
using namespace kiln;

namespace {

using ::onnx::TensorProto;

struct Case {
  std::string op;  // LSTM, GRU, RNN
  int64_t gates;
  bool linear_before_reset = false;
  bool peepholes = false;
};

// X, W, R, B, sequence_lens, initial_h (, initial_c, P) as graph inputs and
// initializers; outputs Y and Y_h (and Y_c).
std::string write_model(const Case& c, int64_t t, int64_t n, int64_t in, int64_t h, const Tensor& lengths) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(14);
  auto* g = m.mutable_graph();
  auto io = [&](bool input, const std::string& name, int elem, const Shape& shape) {
    auto* v = input ? g->add_input() : g->add_output();
    v->set_name(name);
    auto* type = v->mutable_type()->mutable_tensor_type();
    type->set_elem_type(elem);
    for (int64_t d : shape) type->mutable_shape()->add_dim()->set_dim_value(d);
  };
  auto init = [&](const std::string& name, const Tensor& value) {
    auto* p = g->add_initializer();
    onnx_io::to_proto(value, *p);
    p->set_name(name);
  };
  manual_seed(11);
  const int64_t dirs = 2, gh = c.gates * h;
  init("W", randn({dirs, gh, in}) * 0.5);
  init("R", randn({dirs, gh, h}) * 0.5);
  init("B", randn({dirs, 2 * gh}) * 0.3);
  init("lens", lengths);
  io(true, "X", TensorProto::FLOAT, Shape{t, n, in});
  io(true, "H0", TensorProto::FLOAT, Shape{dirs, n, h});
  auto* node = g->add_node();
  node->set_op_type(c.op);
  node->set_name("recurrent");
  for (const char* i : {"X", "W", "R", "B", "lens", "H0"}) node->add_input(i);
  if (c.op == "LSTM") {
    io(true, "C0", TensorProto::FLOAT, Shape{dirs, n, h});
    node->add_input("C0");
    if (c.peepholes) {
      init("P", randn({dirs, 3 * h}) * 0.5);
      node->add_input("P");
    }
  }
  for (const char* o : {"Y", "Y_h"}) node->add_output(o);
  if (c.op == "LSTM") node->add_output("Y_c");
  auto attr = [&](const char* name, int64_t v) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  };
  attr("hidden_size", h);
  if (c.linear_before_reset) attr("linear_before_reset", 1);
  auto* dir = node->add_attribute();
  dir->set_name("direction");
  dir->set_type(::onnx::AttributeProto::STRING);
  dir->set_s("bidirectional");
  io(false, "Y", TensorProto::FLOAT, Shape{t, dirs, n, h});
  io(false, "Y_h", TensorProto::FLOAT, Shape{dirs, n, h});
  if (c.op == "LSTM") io(false, "Y_c", TensorProto::FLOAT, Shape{dirs, n, h});
  const std::string name = "recurrent_" + c.op + (c.linear_before_reset ? "_lbr" : "") + (c.peepholes ? "_p" : "");
  const std::string path = (kt::scratch_dir(name) / (name + ".onnx")).string();
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

TEST(RecurrentLengths, ShortSequencesAndPeepholesMatchOnnxRuntime) {
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh)";
  const int64_t t = 5, n = 3, in = 4, h = 6;
  const Tensor lengths = from_vector<int32_t>({5, 2, 4}, {3});
  for (const Case& c : {Case{"LSTM", 4}, Case{"LSTM", 4, false, true}, Case{"GRU", 3}, Case{"GRU", 3, true},
                        Case{"RNN", 1}}) {
    const std::string path = write_model(c, t, n, in, h, lengths);
    manual_seed(5);
    const Tensor x = randn(Shape{t, n, in});
    const Shape state{2, n, h};
    std::vector<std::pair<std::string, Tensor>> inputs = {{"X", x}, {"H0", randn(state) * 0.5}};
    if (c.op == "LSTM") inputs.push_back({"C0", randn(state) * 0.5});
    std::vector<Tensor> kiln_in;
    for (const auto& [name, value] : inputs) kiln_in.push_back(value);
    const auto ours = InferenceSession(path).run(kiln_in);
    const auto theirs = kt::run_ort(path, inputs).outputs;
    ASSERT_EQ(ours.size(), theirs.size()) << path;
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(kt::all_close(ours[i], theirs[i].second, 1e-5, 1e-5)) << path << " output " << theirs[i].first;
    // Past a sequence's length, Y is zero: sequence 1 has two steps.
    const Tensor y = ours[0].select(2, 1);  // [T, D, H]
    EXPECT_EQ(sum(abs(y.slice(0, 2, t))).item<float>(), 0.0f) << path;
    EXPECT_GT(sum(abs(y.slice(0, 0, 2))).item<float>(), 0.0f) << path;
  }
}

}  // namespace

// InferenceSession on models PyTorch exported (tests/fixtures/onnx, made by
// make_onnx_fixtures.py): the outputs match PyTorch's and ONNX Runtime's; bad
// files and bad inputs get errors that say what is wrong.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "kiln/allocator.h"
#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "support/close.h"
#include "support/error_message.h"
#include "support/onnx_builder.h"
#include "support/ort_reference.h"
#include "support/scratch.h"

namespace {
using namespace kiln;
namespace kt = kiln::testing;
using ::onnx::TensorProto;

std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class PyTorchExport : public ::testing::TestWithParam<const char*> {};

TEST_P(PyTorchExport, MatchesPyTorchAndOnnxRuntime) {
  std::string name = GetParam();
  Tensor x = io::load_npy(fixture(name + ".input.npy"));
  Tensor expected = io::load_npy(fixture(name + ".output.npy"));
  for (int level : {0, 2}) {
    SessionOptions o;
    o.optimization_level = level;
    InferenceSession session(fixture(name + ".onnx"), o);
    EXPECT_EQ(session.producer().rfind("pytorch", 0), 0u);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the traced run, then the compiled graph
      auto out = session.run({x});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_TRUE(kt::all_close(out[0], expected, 1e-4, 1e-4)) << name << " at level " << level << ", run " << repeat;
    }
  }
  {  // On the reference backend: its loops where it has them, the CPU's kernels elsewhere.
    SessionOptions o;
    o.device = "reference";
    InferenceSession session(fixture(name + ".onnx"), o);
    for (int repeat = 0; repeat < 2; ++repeat) {
      auto out = session.run({x});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].device().type, DeviceType::Reference);
      EXPECT_TRUE(kt::all_close(out[0].to(cpu_device()), expected, 1e-4, 1e-4)) << name << " on the reference backend";
    }
  }
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed";
  auto ort = kt::run_ort(fixture(name + ".onnx"), {{"input", x}});
  InferenceSession session(fixture(name + ".onnx"));
  EXPECT_TRUE(kt::all_close(session.run({x})[0], ort.outputs[0].second, 1e-4, 1e-4)) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PyTorchExport,
                         ::testing::Values("mlp", "cnn", "resnet18", "mobilenet_v2", "transformer_encoder", "gpt_block", "unet",
                                           "text_lstm", "text_gru", "shufflenet_v2", "squeezenet", "mobilenet_v3"),
                         [](const auto& info) { return std::string(info.param); });

// Half precision on request: the model under autocast (its convolutions and
// products in bfloat16 or float16), its outputs in the dtype it declares,
// close to float32's and not the same; anything else is refused by name.
TEST(InferenceSession, HalfPrecisionRunsCloseToFloat32) {
  const Tensor x = io::load_npy(fixture("resnet18.input.npy"));
  const Tensor want = InferenceSession(fixture("resnet18.onnx")).run({x})[0];
  for (const char* precision : {"bf16", "float16"}) {
    SessionOptions o;
    o.precision = precision;
    InferenceSession session(fixture("resnet18.onnx"), o);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the traced run, then the compiled graph
      const Tensor got = session.run({x})[0];
      EXPECT_EQ(got.dtype(), DType::Float32) << precision;
      const double scale = amax(abs(want)).item<double>();
      const double diff = amax(abs(got - want)).item<double>();
      EXPECT_LT(diff, (std::string(precision) == "bf16" ? 0.05 : 0.01) * scale) << precision << ", run " << repeat;
      EXPECT_GT(diff, 1e-6 * scale) << precision << ": the same as float32, so nothing ran in half precision";
    }
  }
  SessionOptions bad;
  bad.precision = "int4";
  const std::string msg = kt::message_of([&] { InferenceSession(fixture("cnn.onnx"), bad); });
  EXPECT_NE(msg.find("SessionOptions::precision is 'int4', not a precision Kiln infers in: give float32 (fp32), "
                     "bfloat16 (bf16) or float16 (fp16)"),
            std::string::npos)
      << msg;
}

TEST(InferenceSession, DynamicBatchRowsAreTheirOwn) {
  InferenceSession session(fixture("cnn.onnx"));
  ASSERT_EQ(session.inputs().size(), 1u);
  EXPECT_EQ(session.inputs()[0].str(), "input: float32 [batch, 1, 28, 28]");
  EXPECT_EQ(session.opset(), 14);
  Tensor five = rand({5, 1, 28, 28});
  Tensor y5 = session.run({five})[0];
  EXPECT_EQ(y5.shape(), (Shape{5, 10}));
  // Each row of a batch is computed as if alone: batch 1 (compiled anew, then
  // from the cache) gives the rows of batch 5.
  for (int64_t row : {3, 0}) {
    Tensor y1 = session.run({five.slice(0, row, row + 1).contiguous()})[0];
    EXPECT_EQ(y1.shape(), (Shape{1, 10}));
    EXPECT_TRUE(kt::all_close(y1, y5.slice(0, row, row + 1), 1e-5, 1e-5)) << "row " << row;
  }
}

// Batch sizes 1..8 padded to buckets of 4 and 8: two graphs, and each call's
// rows are its own, cut back from the padded batch.
TEST(InferenceSession, BucketsBoundTheGraphsAndCutTheOutputsBack) {
  SessionOptions o;
  o.buckets = {{"input", 0, {4, 8}}};
  InferenceSession bucketed(fixture("cnn.onnx"), o), plain(fixture("cnn.onnx"));
  manual_seed(9);
  for (int64_t batch = 1; batch <= 8; ++batch) {
    const Tensor x = rand({batch, 1, 28, 28});
    const Tensor y = bucketed.run({x})[0];
    ASSERT_EQ(y.shape(), (Shape{batch, 10}));
    EXPECT_TRUE(kt::all_close(y, plain.run({x})[0], 1e-5, 1e-5)) << "batch " << batch;
  }
  EXPECT_EQ(bucketed.compiles(), 2);
  const std::string past = kt::message_of([&] { bucketed.run({rand({9, 1, 28, 28})}); });
  EXPECT_NE(past.find("past its largest bucket (8)"), std::string::npos) << past;
  o.buckets = {{"images", 0, {4}}};
  const std::string unknown = kt::message_of([&] { InferenceSession(fixture("cnn.onnx"), o); });
  EXPECT_NE(unknown.find("buckets name input 'images', which the model lacks; its inputs are input"), std::string::npos)
      << unknown;
}

// A model whose length is a named dimension: the first call compiles, and
// every other length runs that graph with its sizes worked out (its
// projection, softmax and mean over the length), with the answers of the
// model run node by node.
TEST(InferenceSession, ANamedLengthCompilesOnce) {
  kt::OnnxBuilder b;
  b.io(true, "x", TensorProto::FLOAT, {1, -1, 8});
  manual_seed(10);
  b.init("w", randn({8, 8}) * 0.5);
  b.init("bias", randn({8}));
  b.init("axes", from_vector<int64_t>({1}, {1}));  // (an initializer: fixed, not bound by value)
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Add", {"h", "bias"}, {"hb"});
  b.node("Relu", {"hb"}, {"r"});
  kt::OnnxBuilder::integer(b.node("Softmax", {"r"}, {"p"}), "axis", -1);
  b.node("ReduceMean", {"p", "axes"}, {"m"});
  b.node("Sub", {"p", "m"}, {"y"});
  b.io(false, "y", TensorProto::FLOAT, {1, -1, 8});
  const std::string path = b.save("named_length.onnx");
  SessionOptions node_by_node;
  node_by_node.optimization_level = 0;
  InferenceSession session(path), eager(path, node_by_node);
  for (int64_t n : {6, 11, 3, 20}) {
    const Tensor x = randn({1, n, 8});
    const Tensor y = session.run({x})[0];
    ASSERT_EQ(y.shape(), (Shape{1, n, 8}));
    EXPECT_TRUE(kt::all_close(y, eager.run({x})[0], 1e-5, 1e-5)) << "length " << n;
  }
  EXPECT_EQ(session.compiles(), 1);
}

// A text model's positions computed from its input's length, as exports
// write them (Shape, Gather, Range, then the rows of a position table), and
// its tokens looked up by [batch, length] indices: one graph serves every
// batch size and length (the positions are a slice of the table whose end
// is the length), with the answers of the model run node by node.
TEST(InferenceSession, PositionsFromTheLengthCompileOnce) {
  kt::OnnxBuilder b;
  b.io(true, "ids", TensorProto::INT64, {-1, -2});
  manual_seed(11);
  b.init("tokens", randn({50, 8}));
  b.init("positions", randn({64, 8}));
  b.init("w", randn({8, 4}) * 0.5);
  b.init("one", from_vector<int64_t>({1}, Shape{}));
  b.init("zero", from_vector<int64_t>({0}, Shape{}));
  b.node("Gather", {"tokens", "ids"}, {"t"});
  b.node("Shape", {"ids"}, {"shape"});
  b.node("Gather", {"shape", "one"}, {"length"});
  b.node("Range", {"zero", "length", "one"}, {"at"});
  b.node("Gather", {"positions", "at"}, {"p"});
  b.node("Add", {"t", "p"}, {"e"});
  b.node("MatMul", {"e", "w"}, {"y"});
  b.io(false, "y", TensorProto::FLOAT, {-1, -2, 4});
  const std::string path = b.save("positions_from_length.onnx");
  SessionOptions node_by_node;
  node_by_node.optimization_level = 0;
  InferenceSession session(path), eager(path, node_by_node);
  for (auto [batch, length] : std::vector<std::pair<int64_t, int64_t>>{{1, 20}, {1, 7}, {3, 12}, {2, 33}, {1, 64}}) {
    Tensor ids = Tensor::empty({batch, length}, DType::Int64);
    for (int64_t i = 0; i < ids.numel(); ++i) ids.data<int64_t>()[i] = (i * 7 + length) % 50;
    const Tensor y = session.run({ids})[0];
    ASSERT_EQ(y.shape(), (Shape{batch, length, 4}));
    EXPECT_TRUE(kt::all_close(y, eager.run({ids})[0], 1e-5, 1e-5)) << batch << "x" << length;
  }
  EXPECT_EQ(session.compiles(), 1);
}

std::map<std::string, int>* g_ops_seen = nullptr;
void note_op(const OpDef& op, const std::vector<Tensor>&) {
  if (g_ops_seen) ++(*g_ops_seen)[op.name];
}

// run_in_place: the caller writes the rows into the graph's own input buffer
// and reads the outputs where the graph left them; no op runs outside the
// graph but the shape check's expand (and the one copy the caller makes of
// the output), and the buffer is the same on every run.
TEST(InferenceSession, RunInPlaceWritesIntoTheGraphsOwnBuffers) {
  InferenceSession session(fixture("cnn.onnx"));
  const void* first_slot = nullptr;
  for (int run = 0; run < 3; ++run) {
    Tensor x = rand({3, 1, 28, 28});
    Tensor expected = session.run({x})[0];
    std::map<std::string, int> seen;
    g_ops_seen = &seen;
    set_dispatch_observer(note_op);
    const void* slot_data = nullptr;
    Tensor got;
    session.run_in_place(
        {x.shape()},
        [&](size_t i, Tensor& slot) {
          EXPECT_EQ(i, 0u);
          EXPECT_EQ(slot.shape(), x.shape());
          std::memcpy(slot.raw_data(), x.raw_data(), x.numel() * sizeof(float));
          slot_data = slot.raw_data();
        },
        [&](const std::vector<Tensor>& outputs) {
          ASSERT_EQ(outputs.size(), 1u);
          got = outputs[0].clone();
        });
    set_dispatch_observer(nullptr);
    g_ops_seen = nullptr;
    EXPECT_TRUE(kt::all_close(got, expected, 1e-5, 1e-5)) << "run " << run;
    if (run == 0) first_slot = slot_data;
    EXPECT_EQ(slot_data, first_slot) << "run " << run;
    // The first run traces the graph; later ones run nothing outside it.
    if (run > 0) {
      EXPECT_EQ(seen, (std::map<std::string, int>{{"expand", 1}, {"copy", 1}})) << "run " << run;
    }
  }
  // Shapes are checked before anything is written.
  bool filled = false;
  std::string msg = kt::message_of([&] {
    session.run_in_place({{3, 28, 28}}, [&](size_t, Tensor&) { filled = true; }, [](const std::vector<Tensor>&) {});
  });
  EXPECT_NE(msg.find("input 'input' expects float32 [batch, 1, 28, 28], got float32 [3, 28, 28]"), std::string::npos) << msg;
  EXPECT_FALSE(filled);
}

TEST(InferenceSession, DynamicBatchMatchesOnnxRuntime) {
  if (!kt::ort_available()) GTEST_SKIP() << "onnxruntime-node is not installed (scripts/install-deps.sh installs it)";
  InferenceSession session(fixture("cnn.onnx"));
  for (int64_t batch : {1, 5}) {
    Tensor x = rand({batch, 1, 28, 28});
    EXPECT_TRUE(kt::all_close(session.run({x})[0], kt::run_ort(fixture("cnn.onnx"), {{"input", x}}).outputs[0].second))
        << "batch " << batch;
  }
}

// inf and NaN get one answer, whatever the batch and however often they are
// run: the one of the plain sum of products (the compiled graph's Winograd
// convolutions would turn a single inf into a tile of NaN).
TEST(InferenceSession, NonFiniteInputsGetTheSameAnswerEveryRun) {
  for (const std::string name : {"resnet18", "cnn"}) {
    const std::string model = fixture(name + ".onnx");
    Tensor clean = io::load_npy(fixture(name + ".input.npy"));
    const int64_t h = clean.shape()[2];
    SessionOptions eager_options;
    eager_options.optimization_level = 0;
    InferenceSession eager(model, eager_options);
    InferenceSession session(model);
    session.run({clean});  // compiled at this batch size before the odd input comes
    for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      Tensor x = clean.clone();
      x.data<float>()[(h / 2) * h + h / 2] = bad;  // row 0, channel 0, the middle
      EXPECT_EQ(first_non_finite(x), (h / 2) * h + h / 2);
      Tensor reference = eager.run({x})[0];
      for (int repeat = 0; repeat < 3; ++repeat)
        EXPECT_TRUE(kt::all_close(session.run({x})[0], reference, 1e-4, 1e-4, true))
            << name << " with " << bad << ", run " << repeat;
      if (session.inputs()[0].shape[0] >= 0) continue;  // a fixed batch
      // Alone, the odd row gets the same answer as within its batch.
      Tensor alone = session.run({x.slice(0, 0, 1).contiguous()})[0];
      EXPECT_TRUE(kt::all_close(alone, reference.slice(0, 0, 1), 1e-4, 1e-4, true)) << name << " with " << bad;
    }
    EXPECT_EQ(first_non_finite(clean), -1);
  }
}

TEST(InferenceSession, RunsFromManyThreadsAtOnce) {
  InferenceSession session(fixture("resnet18.onnx"));
  std::vector<Tensor> inputs, expected;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(randn({2, 3, 64, 64}));
    expected.push_back(session.run({inputs.back()})[0]);
  }
  // Each thread may get a fresh compiled copy, whose first run is the traced
  // eager run (batch norm not folded): equal up to rounding, hence 1e-5.
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 10; ++r) {
        int i = (t + r) % 4;
        if (!kt::all_close(session.run({inputs[i]})[0], expected[i], 1e-5, 1e-5)) ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// Each signature's runs move between thread counts while the governor
// measures them (oneDNN primitives are built per count): the answers agree
// with runs that keep every thread, up to the order of summation.
TEST(InferenceSession, AdaptingTheThreadCountKeepsTheAnswers) {
  const int before = get_num_threads();
  SessionOptions fixed;
  fixed.threads = 2;
  fixed.adapt_threads = false;
  InferenceSession reference(fixture("resnet18.onnx"), fixed);
  SessionOptions adapting;
  adapting.threads = 2;
  InferenceSession session(fixture("resnet18.onnx"), adapting);
  Tensor x = randn({2, 3, 64, 64});
  Tensor expected = reference.run({x})[0];
  for (int r = 0; r < 14; ++r)  // through the governor's first measurements of both counts
    EXPECT_TRUE(kt::all_close(session.run({x})[0], expected, 1e-5, 1e-5)) << "run " << r;
  set_num_threads(before);
}

TEST(InferenceSession, NamedInputsAndOutputs) {
  InferenceSession session(fixture("mlp.onnx"));
  Tensor x = io::load_npy(fixture("mlp.input.npy"));
  auto out = session.run(std::map<std::string, Tensor>{{"input", x}});
  ASSERT_TRUE(out.count("output"));
  EXPECT_TRUE(kt::all_close(out["output"], io::load_npy(fixture("mlp.output.npy"))));
  std::string msg = kt::message_of([&] { session.run(std::map<std::string, Tensor>{{"images", x}}); });
  EXPECT_NE(msg.find("input 'input' is missing"), std::string::npos) << msg;
}

TEST(InferenceSession, WrongInputsAreRefusedWithTheExpectedShape) {
  InferenceSession session(fixture("mlp.onnx"));
  std::string msg = kt::message_of([&] { session.run({rand({2, 1, 28, 29})}); });
  EXPECT_NE(msg.find("input 'input' expects float32 [2, 1, 28, 28], got float32 [2, 1, 28, 29]"), std::string::npos) << msg;
  msg = kt::message_of([&] { session.run({rand({2, 1, 28, 28}, DType::Float64)}); });
  EXPECT_NE(msg.find("got float64"), std::string::npos) << msg;
  msg = kt::message_of([&] { session.run(std::vector<Tensor>{}); });
  EXPECT_NE(msg.find("takes 1 input(s)"), std::string::npos) << msg;
}

TEST(InferenceSession, MalformedFilesAreRefused) {
  std::string bytes = read_bytes(fixture("mlp.onnx"));
  for (size_t cut : {bytes.size() / 2, bytes.size() - 7, size_t{20}}) {
    std::string msg = kt::message_of([&] { InferenceSession::from_bytes(bytes.substr(0, cut), {}, "cut.onnx"); });
    EXPECT_NE(msg.find("cut.onnx"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("malformed") != std::string::npos) << msg;
  }
  EXPECT_NE(kt::message_of([] { InferenceSession::from_bytes("", {}, "empty.onnx"); }).find("empty"), std::string::npos);
  EXPECT_NE(kt::message_of([] { InferenceSession("/nonexistent/model.onnx"); }).find("cannot open"), std::string::npos);
  std::string npy = read_bytes(fixture("mlp.input.npy"));
  EXPECT_NE(kt::message_of([&] { InferenceSession::from_bytes(npy, {}, "x.npy"); }).find("not"), std::string::npos);
}

TEST(InferenceSession, UnsupportedOpsAreListedAtOnce) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(3);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  auto add = [&](const char* op, const char* domain, const char* name, const char* from, const char* to) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_domain(domain);
    n->set_name(name);
    n->add_input(from);
    n->add_output(to);
  };
  add("Relu", "", "ok", "x", "a");
  add("Det", "", "det1", "a", "b");
  add("Det", "", "det2", "b", "c");
  add("Binarizer", "ai.onnx.ml", "bin", "c", "y");
  g->add_output()->set_name("y");
  std::string msg;
  try {
    InferenceSession::from_bytes(m.SerializeAsString(), {}, "m.onnx");
  } catch (const UnsupportedError& e) {
    msg = e.what();
    EXPECT_EQ(e.missing_ops, (std::vector<std::string>{"Det", "ai.onnx.ml::Binarizer"}));
  }
  EXPECT_NE(msg.find("2 op type(s)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Det (opset 17): 2 node(s): det1, det2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ai.onnx.ml::Binarizer (opset 3): 1 node(s): bin"), std::string::npos) << msg;
}

// One op, one definition: an ONNX type that an op writes as its whole form
// is read back by an op, not by the runtime's table of compositions; only
// Identity (a name for its input) and the variadic Max and Min are the
// runtime's own.
TEST(InferenceSession, OpsReadTheOnnxTypesTheyWrite) {
  std::set<std::string> read_by_ops;
  for (const OpDef* op : OpRegistry::instance().all())
    for (const std::string& type : op->onnx_import.types) read_by_ops.insert(type);
  const std::set<std::string> runtime_own = {"Identity", "Max", "Min"};
  const std::vector<std::string> supported = supported_onnx_ops();
  for (const OpDef* op : OpRegistry::instance().all()) {
    if (op->onnx.types.size() != 1) continue;
    const std::string& type = op->onnx.types[0];
    if (runtime_own.count(type)) continue;
    EXPECT_TRUE(read_by_ops.count(type)) << "op '" << op->name << "' writes ONNX " << type
                                        << " but no op reads it (the runtime's table does, or nothing)";
  }
  for (const std::string& type : runtime_own)
    EXPECT_NE(std::find(supported.begin(), supported.end(), type), supported.end()) << type;
  // Conv, pools, normalizations and the shape ops are read by their ops.
  for (const char* type : {"Conv", "ConvTranspose", "MaxPool", "AveragePool", "BatchNormalization", "LayerNormalization",
                           "Reshape", "Transpose", "Concat", "Slice", "Gather", "Pad", "Gemm", "MatMul"})
    EXPECT_TRUE(read_by_ops.count(type)) << type;
}

// Ops read their own ONNX nodes (OpDef::onnx_import), old opsets included:
// Softmax before opset 13 flattens at `axis`, and Add before opset 7
// broadcasts only with broadcast=1 at `axis`.
TEST(InferenceSession, OpReadersHandleOldOpsets) {
  ::onnx::ModelProto m;
  m.set_ir_version(3);
  m.add_opset_import()->set_version(6);
  auto* g = m.mutable_graph();
  for (const char* name : {"x", "b"}) {
    auto* in = g->add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  }
  auto* add = g->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("b");
  add->add_output("s");
  for (auto [name, value] : {std::pair<const char*, int64_t>{"broadcast", 1}, {"axis", 1}}) {
    auto* a = add->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(value);
  }
  auto* normalize = g->add_node();
  normalize->set_op_type("Softmax");
  normalize->add_input("s");
  normalize->add_output("y");
  auto* axis = normalize->add_attribute();
  axis->set_name("axis");
  axis->set_type(::onnx::AttributeProto::INT);
  axis->set_i(1);
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  InferenceSession session = InferenceSession::from_bytes(m.SerializeAsString());
  Tensor x = randn({2, 3, 4}), b = randn({3});
  Tensor y = session.run(std::vector<Tensor>{x, b})[0];
  // b aligns with axis 1; softmax runs over everything after axis 1 at once.
  Tensor s = x + b.reshape({1, 3, 1});
  Tensor want = kiln::softmax(s.reshape({2, 12}), 1).reshape({2, 3, 4});
  EXPECT_TRUE(kt::all_close(y, want, 1e-6, 1e-6));
  for (const OpDef* op : OpRegistry::instance().all())
    for (const std::string& type : op->onnx_import.types) {
      auto loaded = supported_onnx_ops();
      EXPECT_NE(std::find(loaded.begin(), loaded.end(), type), loaded.end()) << op->name << " reads " << type;
    }
}

// PyTorch exports attention dropout of p=0 as Dropout(ratio=0,
// training_mode=true): the identity in any mode, not a refusal. A real ratio
// with training_mode stays refused, saying how to export.
TEST(InferenceSession, DropoutOfRatioZeroIsTheIdentityInAnyMode) {
  auto model = [](float ratio) {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    auto* in = g->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    auto* r = g->add_initializer();
    r->set_name("ratio");
    r->set_data_type(::onnx::TensorProto::FLOAT);
    r->add_float_data(ratio);
    auto* t = g->add_initializer();
    t->set_name("training");
    t->set_data_type(::onnx::TensorProto::BOOL);
    t->add_int32_data(1);
    auto* n = g->add_node();
    n->set_op_type("Dropout");
    for (const char* name : {"x", "ratio", "training"}) n->add_input(name);
    n->add_output("y");
    auto* out = g->add_output();
    out->set_name("y");
    out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
    return m.SerializeAsString();
  };
  InferenceSession session = InferenceSession::from_bytes(model(0.0f));
  Tensor x = randn({2, 5});
  EXPECT_TRUE(kt::all_close(session.run(std::vector<Tensor>{x})[0], x, 0, 0));
  std::string e = kt::message_of([&] { InferenceSession::from_bytes(model(0.1f)).run(std::vector<Tensor>{x}); });
  EXPECT_NE(e.find("training_mode=true with ratio 0.1 is not supported"), std::string::npos) << e;
}

// Run eagerly, a chain of 16 ops holds at most a few activations at once:
// each value is dropped after its last reader.
TEST(InferenceSession, EagerRunsDropEachValueAfterItsLastUse) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* type = in->mutable_type()->mutable_tensor_type();
  type->set_elem_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : {256, 1024}) type->mutable_shape()->add_dim()->set_dim_value(d);
  std::string last = "x";
  for (int i = 0; i < 16; ++i) {
    auto* n = g->add_node();
    n->set_op_type(i % 2 ? "Relu" : "Neg");
    n->add_input(last);
    char name[16];
    std::snprintf(name, sizeof name, "v%d", i);
    last = name;
    n->add_output(last);
  }
  auto* out = g->add_output();
  out->set_name(last);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  SessionOptions eager;
  eager.optimization_level = 0;
  InferenceSession session = InferenceSession::from_bytes(m.SerializeAsString(), eager, "chain.onnx");
  Tensor x = randn({256, 1024});
  session.run({x});
  cpu_allocator_reset_peak();
  const int64_t base = cpu_allocator_stats().bytes_in_use;
  Tensor y = session.run({x})[0];
  const int64_t activation = x.numel() * 4, peak = cpu_allocator_stats().peak_bytes_in_use - base;
  EXPECT_LE(peak, 3 * activation) << "peak " << peak << " bytes for activations of " << activation;
  Tensor want = x;
  for (int i = 0; i < 16; ++i) want = i % 2 ? relu(want) : -want;
  EXPECT_TRUE(kt::all_close(y, want, 0, 0));
}

TEST(InferenceSession, OptionsAreChecked) {
  SessionOptions gpu;
  gpu.device = "cuda";
  EXPECT_NE(kt::message_of([&] { InferenceSession(fixture("mlp.onnx"), gpu); }).find("device 'cuda'"), std::string::npos);
  SessionOptions eager_on_reference;
  eager_on_reference.device = "reference";
  eager_on_reference.optimization_level = 0;
  EXPECT_NE(kt::message_of([&] { InferenceSession(fixture("mlp.onnx"), eager_on_reference); }).find("give 1 or 2"),
            std::string::npos);
  SessionOptions level;
  level.optimization_level = 3;
  EXPECT_NE(kt::message_of([&] { InferenceSession(fixture("mlp.onnx"), level); }).find("optimization_level"),
            std::string::npos);
}

TEST(Npy, RoundTripsAndRefusesBadFiles) {
  std::string path = (kt::scratch_dir("npy") / "t.npy").string();
  for (DType d : {DType::Float32, DType::Int64, DType::Bool}) {
    Tensor t = cast(randn({2, 3}) * 10.0, d);
    io::save_npy(path, t);
    EXPECT_TRUE(kt::all_close(io::load_npy(path), t, 0, 0));
    EXPECT_EQ(io::load_npy(path).dtype(), d);
  }
  io::save_npy(path, randn({4}));
  EXPECT_EQ(io::load_npy(path).shape(), (Shape{4}));
  std::string good = read_bytes(path);
  EXPECT_NE(kt::message_of([&] { io::parse_npy(good.substr(0, good.size() - 1), "x.npy"); }).find("truncated"),
            std::string::npos);
  EXPECT_NE(kt::message_of([&] { io::parse_npy("hello world", "x.npy"); }).find("not a .npy file"), std::string::npos);
}

}  // namespace

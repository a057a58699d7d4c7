// An LLM decoder as onnxruntime-genai exports it (GroupQueryAttention over a
// key/value cache with rotary embeddings, MatMulNBits weights; the fixture
// contrib_genai_decoder_steps, whose data sets are ONNX Runtime's greedy
// decoding, a step each): decoded greedily through an InferenceSession, each
// step's present cache fed back as the next one's past, it gives ONNX
// Runtime's tokens and logits; one graph serves every decoded step's cache
// length and one every prompt length and batch (later sizes instantiate
// them, with no tracing); and `kiln generate` prints the same tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "io/onnx_tensor.h"
#include "kiln/kiln.h"
#include "kiln/onnx.h"
#include "kiln/runtime.h"
#include "support/onnx_builder.h"
#include "support/scratch.h"

using namespace kiln;

namespace {

const std::string kCase = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/contrib/contrib_genai_decoder_steps";

std::string data(int set, const std::string& file) {
  return kCase + "/test_data_set_" + std::to_string(set) + "/" + file + ".pb";
}

int data_sets() {
  int n = 0;
  while (std::filesystem::exists(kCase + "/test_data_set_" + std::to_string(n))) ++n;
  return n;
}

int64_t last_argmax(const Tensor& logits) {
  return argmax(cast(logits.select(1, logits.shape()[1] - 1).reshape({-1}), DType::Float32), 0).item<int64_t>();
}

// Greedy decoding of `count` tokens after `prompt`, the caches in the
// model's dtype; the last step's logits in *logits.
std::vector<int64_t> decode(InferenceSession& session, const std::vector<int64_t>& prompt, int count, Tensor* logits) {
  const auto& inputs = session.inputs();
  std::vector<Tensor> feed(inputs.size());
  for (size_t i = 2; i < inputs.size(); ++i)
    feed[i] = zeros({1, inputs[i].shape[1], 0, inputs[i].shape[3]}, inputs[i].dtype);
  std::vector<int64_t> step = prompt, tokens;
  int64_t seen = 0;
  while (static_cast<int>(tokens.size()) < count) {
    feed[0] = from_vector(step, {1, static_cast<int64_t>(step.size())});
    seen += static_cast<int64_t>(step.size());
    feed[1] = ones({1, seen}, DType::Int64);
    const std::vector<Tensor> out = session.run(feed);
    for (size_t i = 2; i < inputs.size(); ++i)
      feed[i] = out[i - 1];  // present.L.* follow logits, as past.L.* follow the mask
    *logits = out[0];
    tokens.push_back(last_argmax(out[0]));
    step = {tokens.back()};
  }
  return tokens;
}

TEST(LlmDecoder, GreedyDecodingGivesOnnxRuntimesTokensWithOneGraphPerPhase) {
  const int steps = data_sets();
  ASSERT_GE(steps, 4);
  std::vector<int64_t> expected;  // the token each of ONNX Runtime's steps fed to the next
  for (int s = 1; s < steps; ++s) expected.push_back(load_tensor_pb(data(s, "input_0")).item<int64_t>());
  expected.push_back(last_argmax(load_tensor_pb(data(steps - 1, "output_0"))));
  const std::vector<int64_t> prompt = load_tensor_pb(data(0, "input_0")).to_vector<int64_t>();

  SessionOptions options;
  options.adapt_threads = false;
  InferenceSession session(kCase + "/model.onnx", options);
  ASSERT_EQ(session.inputs()[0].name, "input_ids");
  ASSERT_EQ(session.inputs()[2].name, "past_key_values.0.key");
  Tensor logits;
  EXPECT_EQ(decode(session, prompt, steps, &logits), expected);
  const Tensor reference = load_tensor_pb(data(steps - 1, "output_0"));
  ASSERT_EQ(logits.shape(), reference.shape());
  EXPECT_LT(amax(abs(logits - reference)).item<double>(), 1e-4);
  // The prompt's graph, then the first decoded step's, which every later cache length instantiates.
  EXPECT_EQ(session.compiles(), 2);

  // Another prompt's length instantiates the prompt graph; its tokens are
  // those of a fresh session (nothing left over from the first sequence).
  const std::vector<int64_t> longer = {5, 11, 64, 2, 30, 47, 8, 19, 3};
  InferenceSession fresh(kCase + "/model.onnx", options);
  Tensor ignored;
  EXPECT_EQ(decode(session, longer, 4, &ignored), decode(fresh, longer, 4, &ignored));
  EXPECT_EQ(session.compiles(), 2);

  // Two prompts at once instantiate it too (its batch of 1 generalized),
  // each row giving that prompt's logits alone.
  const std::vector<int64_t> other = {7, 3, 3, 90, 12, 5, 61, 4, 28};
  const auto& inputs = session.inputs();
  auto first_step = [&](const std::vector<int64_t>& ids, int64_t rows) {
    std::vector<Tensor> feed(inputs.size());
    const int64_t length = static_cast<int64_t>(ids.size()) / rows;
    feed[0] = from_vector(ids, {rows, length});
    feed[1] = ones({rows, length}, DType::Int64);
    for (size_t i = 2; i < inputs.size(); ++i)
      feed[i] = zeros({rows, inputs[i].shape[1], 0, inputs[i].shape[3]}, inputs[i].dtype);
    return session.run(feed)[0];
  };
  std::vector<int64_t> both = longer;
  both.insert(both.end(), other.begin(), other.end());
  const Tensor pair = first_step(both, 2);
  EXPECT_EQ(session.compiles(), 2);
  EXPECT_LT(amax(abs(pair.select(0, 0) - first_step(longer, 1).select(0, 0))).item<double>(), 1e-5);
  EXPECT_LT(amax(abs(pair.select(0, 1) - first_step(other, 1).select(0, 0))).item<double>(), 1e-5);
}

// The decoder in float16 (its weights, caches and logits; ONNX Runtime's
// GPU exports are): computed in float32 and rounded at each node's end,
// it decodes the float32 model's tokens (ONNX Runtime's float16 run does too).
TEST(LlmDecoder, AFloat16DecoderDecodesTheSameTokens) {
  ::onnx::ModelProto m;
  {
    std::ifstream f(kCase + "/model.onnx", std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&f));
  }
  auto* g = m.mutable_graph();
  for (auto& t : *g->mutable_initializer())
    if (t.data_type() == ::onnx::TensorProto::FLOAT) {
      ::onnx::TensorProto half;
      onnx_io::to_proto(cast(onnx_io::from_proto(t, "float16 test"), DType::Float16), half);
      half.set_name(t.name());
      t = half;
    }
  for (auto* values : {g->mutable_input(), g->mutable_output()})
    for (auto& v : *values)
      if (v.type().tensor_type().elem_type() == ::onnx::TensorProto::FLOAT)
        v.mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT16);
  const std::string path = (kiln::testing::scratch_dir("llm_float16") / "model.onnx").string();
  {
    std::ofstream f(path, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  const int steps = data_sets();
  std::vector<int64_t> expected;
  for (int s = 1; s < steps; ++s) expected.push_back(load_tensor_pb(data(s, "input_0")).item<int64_t>());
  InferenceSession session(path);
  ASSERT_EQ(session.inputs()[2].dtype, DType::Float16);
  Tensor logits;
  EXPECT_EQ(decode(session, load_tensor_pb(data(0, "input_0")).to_vector<int64_t>(), steps - 1, &logits), expected);
  EXPECT_EQ(logits.dtype(), DType::Float16);
}

TEST(LlmDecoder, KilnGeneratePrintsOnnxRuntimesTokensWithEitherCache) {
  const int steps = data_sets();
  std::string prompt, expected = "tokens:";
  for (int64_t t : load_tensor_pb(data(0, "input_0")).to_vector<int64_t>()) {
    if (!prompt.empty()) prompt.push_back(',');
    prompt.append(std::to_string(t));
  }
  for (int s = 1; s < steps; ++s) {
    expected.push_back(' ');
    expected.append(std::to_string(load_tensor_pb(data(s, "input_0")).item<int64_t>()));
  }
  auto run = [](const std::string& args) {
    std::string out;
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((std::string(KILN_CLI) + " " + args + " 2>&1").c_str(), "r"),
                                               pclose);
    char buffer[512];
    while (pipe && fgets(buffer, sizeof buffer, pipe.get())) out += buffer;
    return out;
  };
  const std::string generate =
      "generate " + kCase + "/model.onnx --prompt " + prompt + " --tokens " + std::to_string(steps - 1);
  // A static cache (GroupQueryAttention's shared buffers: one graph for
  // every step) by default, or one growing a position a token: ONNX
  // Runtime's tokens either way.
  const std::string printed = run(generate);
  EXPECT_NE(printed.find("(static, 64 positions at a time)"), std::string::npos) << printed;
  EXPECT_NE(printed.find(expected + "\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("decode p50"), std::string::npos) << printed;
  EXPECT_NE(printed.find("2 graphs compiled"), std::string::npos) << printed;
  const std::string growing = run(generate + " --cache growing --warmup 0");
  EXPECT_NE(growing.find("(growing)"), std::string::npos) << growing;
  EXPECT_NE(growing.find(expected + "\n"), std::string::npos) << growing;

  // A decoder whose cache grows by concatenation cannot keep a static one:
  // auto finds that on its first step and grows it; static says why not.
  kiln::testing::OnnxBuilder b;
  b.io(true, "input_ids", ::onnx::TensorProto::INT64, {1, -1});
  b.io(true, "attention_mask", ::onnx::TensorProto::INT64, {1, -2});
  b.io(true, "past_key_values.0.key", ::onnx::TensorProto::FLOAT, {1, 1, -3, 4});
  b.io(true, "past_key_values.0.value", ::onnx::TensorProto::FLOAT, {1, 1, -3, 4});
  manual_seed(3);
  b.init("table", randn({8, 4}));
  b.init("head", randn({4, 8}));
  b.init("one", from_vector<int64_t>({1}));
  b.init("two", from_vector<int64_t>({2}));
  b.node("Gather", {"table", "input_ids"}, {"embedded"});
  b.node("Unsqueeze", {"embedded", "one"}, {"new_key"});
  kiln::testing::OnnxBuilder::integer(b.node("Concat", {"past_key_values.0.key", "new_key"}, {"present.0.key"}), "axis",
                                      2);
  kiln::testing::OnnxBuilder::integer(b.node("Concat", {"past_key_values.0.value", "new_key"}, {"present.0.value"}),
                                      "axis", 2);
  kiln::testing::OnnxBuilder::integer(b.node("ReduceSum", {"present.0.key", "two"}, {"context"}), "keepdims", 0);
  b.node("Add", {"embedded", "context"}, {"mixed"});
  b.node("MatMul", {"mixed", "head"}, {"logits"});
  b.io(false, "logits", ::onnx::TensorProto::FLOAT, {1, -1, 8});
  b.io(false, "present.0.key", ::onnx::TensorProto::FLOAT, {1, 1, -4, 4});
  b.io(false, "present.0.value", ::onnx::TensorProto::FLOAT, {1, 1, -4, 4});
  const std::string concatenating = b.save("concat_cache.onnx");
  const std::string fallback = run("generate " + concatenating + " --prompt 1,2,3 --tokens 4");
  EXPECT_NE(fallback.find("(growing)"), std::string::npos) << fallback;
  EXPECT_EQ(fallback.find("(growing)"), fallback.rfind("(growing)")) << fallback;
  auto tokens_of = [](const std::string& out) {
    const size_t at = out.find("tokens:");
    return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
  };
  EXPECT_NE(tokens_of(fallback), "");
  EXPECT_EQ(tokens_of(run("generate " + concatenating + " --prompt 1,2,3 --tokens 4 --cache growing")),
            tokens_of(fallback));
  const std::string refused = run("generate " + concatenating + " --prompt 1,2,3 --cache static");
  EXPECT_NE(refused.find("are not as long as its past ones"), std::string::npos) << refused;
  const std::string not_decoder =
      run("generate " + std::string(KILN_SOURCE_DIR) + "/tests/fixtures/onnx/mlp.onnx --prompt 1,2");
  EXPECT_NE(not_decoder.find("needs an input 'input_ids' and an output 'logits'"), std::string::npos) << not_decoder;
  const std::string bad_prompt = run("generate " + kCase + "/model.onnx --prompt 1,x");
  EXPECT_NE(bad_prompt.find("should be comma-separated token ids"), std::string::npos) << bad_prompt;
}

}  // namespace

// Products with block-quantized weights (matmul_nbits, ONNX Runtime's
// MatMulNBits), in float32 and with a rounded to int8 (accuracy_level 4),
// against their definitions evaluated in float64: every code
// width, blocks whose codes fill whole 16-byte runs (the vector form) and
// blocks that do not (the plain form), a last block cut short, rows past a
// 12-row tile, outputs past a 32-output pair of panels, K past a 256-deep
// slice and ending inside a word of codes, zero points given or defaulted,
// a bias; operands of the wrong shape, and MatMulNBits nodes Kiln does
// not take, refused with a message that says which; and kiln::quantize_weights,
// which writes such nodes, against the float model and ONNX Runtime. ONNX Runtime's own answers for MatMulNBits models
// are the contrib_matmul_nbits fixtures (ctest onnx_contrib).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/quantize.h"
#include "kiln/runtime.h"
#include "support/error_message.h"
#include "support/onnx_builder.h"
#include "support/ort_reference.h"

using kiln::testing::message_of;
using namespace kiln;

namespace {

#define EXPECT_MESSAGE(call, text) \
  EXPECT_NE(message_of([&] { (void)(call); }).find(text), std::string::npos) << message_of([&] { (void)(call); })

struct Weights {
  Tensor b, scales, zeros;  // zeros undefined: the default, 2^(bits - 1)
  std::vector<int> codes;   // [n, blocks * block], unpacked
};

Weights random_weights(int64_t n, int64_t k, int64_t bits, int64_t block, bool zero_points, uint64_t seed) {
  const int64_t blocks = (k + block - 1) / block, per = 8 / bits, blob = block / per;
  manual_seed(seed);
  const std::vector<float> draws = rand({n * blocks * block}).to_vector<float>();
  Weights w;
  std::vector<uint8_t> packed(static_cast<size_t>(n * blocks * blob), 0);
  for (size_t i = 0; i < draws.size(); ++i) {
    const int code = std::min((1 << bits) - 1, static_cast<int>(draws[i] * static_cast<float>(1 << bits)));
    w.codes.push_back(code);
    packed[i / per] |= static_cast<uint8_t>(code << ((i % per) * bits));
  }
  w.b = from_vector<uint8_t>(packed, {n, blocks, blob});
  w.scales = rand({n, blocks}) * 0.02 + 0.005;
  if (zero_points) w.zeros = floor(rand({n, blocks}) * static_cast<double>(1 << bits));
  return w;
}

TEST(NbitsMatmul, ProductsEqualTheirDefinition) {
  struct Case {
    Shape a;
    int64_t n, bits, block;
  };
  const std::vector<Case> cases = {{{1, 64}, 8, 4, 32},   {{6, 100}, 13, 4, 32}, {{2, 3, 256}, 5, 4, 128},
                                   {{9, 48}, 8, 4, 16},   {{5, 40}, 20, 8, 16},  {{2, 72}, 6, 8, 64},
                                   {{4, 128}, 12, 2, 64}, {{2, 40}, 9, 2, 16},   {{11, 33}, 7, 4, 32},
                                   {{14, 300}, 40, 4, 32}};
  uint64_t seed = 70;
  for (const Case& c : cases)
    for (const bool zero_points : {false, true})
      for (const bool with_bias : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << shape_str(c.a) << " x " << c.n << ", " << c.bits << " bits in blocks of " << c.block
                     << (zero_points ? ", zero points" : "") << (with_bias ? ", bias" : ""));
        const int64_t k = c.a.back(), blocks = (k + c.block - 1) / c.block;
        const Weights w = random_weights(c.n, k, c.bits, c.block, zero_points, ++seed);
        manual_seed(++seed);
        const Tensor a = randn(c.a), bias = with_bias ? randn({c.n}) : Tensor();
        const Tensor got = matmul_nbits(a, w.b, w.scales, w.zeros, bias, c.bits, c.block);
        Shape ys = c.a;
        ys.back() = c.n;
        ASSERT_EQ(got.shape(), ys);
        const std::vector<float> av = a.contiguous().to_vector<float>(), gv = got.contiguous().to_vector<float>();
        const std::vector<float> sv = w.scales.to_vector<float>();
        const std::vector<float> zv = zero_points ? w.zeros.to_vector<float>() : std::vector<float>();
        const std::vector<float> bv = with_bias ? bias.to_vector<float>() : std::vector<float>();
        const int64_t rows = a.numel() / k;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < c.n; ++j) {
            double sum = with_bias ? bv[j] : 0.0, magnitude = std::fabs(sum);
            for (int64_t i = 0; i < k; ++i) {
              const int64_t at = j * blocks + i / c.block;
              const double zero = zero_points ? zv[at] : static_cast<double>(1 << (c.bits - 1));
              const double term =
                  av[r * k + i] * (w.codes[static_cast<size_t>(j * blocks * c.block + i)] - zero) * sv[at];
              sum += term;
              magnitude += std::fabs(term);
            }
            // float32 sums of k terms: within a few units of rounding of their magnitudes' sum.
            ASSERT_NEAR(gv[r * c.n + j], sum, 1e-6 * magnitude + 1e-7) << "row " << r << ", column " << j;
          }
      }
}

// accuracy_level 4: a rounded to int8 per block (scale max |a| / 127,
// half to even), each block's products (q - zero) a_q summed in integers,
// times a_scale * scale: against that definition in float64, for 4-bit
// codes in blocks of 32 to 128 (vpdpbusd where the build has VNNI: one row,
// two, tiles of up to 12 rows split evenly, sixteen-output panels and a
// panel cut short, codes transposed 16 words at a time and the words past
// them, a last unit of one 32-code run) and
// 2- and 8-bit ones (the int32 loop); and against the float32 product,
// within what rounding a to 8 bits moves it.
TEST(NbitsMatmul, Int8ProductsEqualTheirDefinition) {
  struct Case {
    Shape a;
    int64_t n, bits, block;
  };
  const std::vector<Case> cases = {{{1, 96}, 9, 4, 32},   {{2, 128}, 8, 4, 64},  {{7, 256}, 6, 4, 128},
                                   {{5, 90}, 4, 4, 32},   {{3, 48}, 5, 8, 16},   {{2, 128}, 3, 2, 64},
                                   {{13, 64}, 20, 4, 32}, {{16, 512}, 40, 4, 32}};
  uint64_t seed = 170;
  for (const Case& c : cases)
    for (const bool zero_points : {false, true}) {
      SCOPED_TRACE(::testing::Message() << shape_str(c.a) << " x " << c.n << ", " << c.bits << " bits in blocks of "
                                        << c.block << (zero_points ? ", zero points" : ""));
      const int64_t k = c.a.back(), blocks = (k + c.block - 1) / c.block;
      const Weights w = random_weights(c.n, k, c.bits, c.block, zero_points, ++seed);
      manual_seed(++seed);
      const Tensor a = randn(c.a), bias = randn({c.n});
      const Tensor got = matmul_nbits(a, w.b, w.scales, w.zeros, bias, c.bits, c.block, 4);
      const Tensor in_float = matmul_nbits(a, w.b, w.scales, w.zeros, bias, c.bits, c.block, 0);
      const std::vector<float> av = a.contiguous().to_vector<float>(), gv = got.contiguous().to_vector<float>();
      const std::vector<float> fv = in_float.contiguous().to_vector<float>(), sv = w.scales.to_vector<float>();
      const std::vector<float> zv = zero_points ? w.zeros.to_vector<float>() : std::vector<float>();
      const std::vector<float> bv = bias.to_vector<float>();
      const int64_t rows = a.numel() / k;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < c.n; ++j) {
          double sum = bv[j], magnitude = std::fabs(sum), moved = 0;
          for (int64_t b = 0; b < blocks; ++b) {
            const int64_t first = b * c.block, last = std::min(k, first + c.block), at = j * blocks + b;
            float most = 0.0f;
            for (int64_t i = first; i < last; ++i) most = std::max(most, std::fabs(av[r * k + i]));
            const float a_scale = most / 127.0f, inverse = a_scale != 0.0f ? 1.0f / a_scale : 0.0f;
            const double zero = zero_points ? zv[at] : static_cast<double>(1 << (c.bits - 1));
            double products = 0;
            for (int64_t i = first; i < last; ++i) {
              const double code = w.codes[static_cast<size_t>(j * blocks * c.block + i)] - zero;
              products += std::nearbyint(av[r * k + i] * inverse) * code;
              moved += a_scale * std::fabs(code) * sv[at];  // a moves by up to half a step
            }
            sum += products * a_scale * sv[at];
            magnitude += std::fabs(products * a_scale * sv[at]);
          }
          ASSERT_NEAR(gv[r * c.n + j], sum, 1e-6 * magnitude + 1e-6) << "row " << r << ", column " << j;
          EXPECT_NEAR(gv[r * c.n + j], fv[r * c.n + j], 0.5 * moved + 1e-5) << "row " << r << ", column " << j;
        }
    }
}

TEST(NbitsMatmul, OperandsOfTheWrongShapeSayWhichAndWhatWasExpected) {
  const Weights w = random_weights(8, 64, 4, 32, true, 1);
  const Tensor a = randn({2, 64});
  EXPECT_MESSAGE(matmul_nbits(randn({2, 70}), w.b, w.scales, w.zeros, Tensor(), 4, 32), "b must be uint8 [N, 3, 16]");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales, w.zeros, Tensor(), 4, 64), "b must be uint8 [N, 1, 32]");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales.reshape({16}), w.zeros, Tensor(), 4, 32),
                 "scales must be float32 [8, 2], got float32[16]");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales, w.zeros, randn({7}), 4, 32), "the bias must be float32 [8]");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales, w.zeros, Tensor(), 3, 32), "bits must be 2, 4 or 8, got 3");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales, w.zeros, Tensor(), 4, 24),
                 "block_size must be a power of two of at least 16, got 24");
  EXPECT_MESSAGE(matmul_nbits(a, w.b, w.scales, w.zeros, Tensor(), 4, 32, 5),
                 "accuracy_level must be 0 to 4 (4: int8 products; else float32), got 5");
}

// A MatMulNBits node with act-order block indices (g_idx, deprecated in
// ONNX Runtime), or with K that A does not have, is refused by name.
TEST(NbitsMatmul, NodesItDoesNotTakeAreRefusedByName) {
  const Weights w = random_weights(8, 64, 4, 32, false, 2);
  for (const bool with_g_idx : {true, false}) {
    kiln::testing::OnnxBuilder b;
    b.m.add_opset_import()->set_domain("com.microsoft");
    b.m.mutable_opset_import(1)->set_version(1);
    b.io(true, "A", ::onnx::TensorProto::FLOAT, {2, with_g_idx ? 64 : 60});
    b.init("B", w.b);
    b.init("scales", w.scales.reshape({16}));
    b.init("g_idx", zeros({64}, DType::Int32));
    auto* n = b.node("MatMulNBits", {"A", "B", "scales", "", with_g_idx ? "g_idx" : ""}, {"Y"});
    n->set_domain("com.microsoft");
    kiln::testing::OnnxBuilder::integer(n, "K", 64);
    kiln::testing::OnnxBuilder::integer(n, "N", 8);
    kiln::testing::OnnxBuilder::integer(n, "block_size", 32);
    b.io(false, "Y", ::onnx::TensorProto::FLOAT, {2, 8});
    const std::string path = b.save(with_g_idx ? "nbits_g_idx.onnx" : "nbits_wrong_k.onnx");
    const std::string message = message_of([&] { InferenceSession(path).run({randn({2, with_g_idx ? 64 : 60})}); });
    SCOPED_TRACE(message);
    EXPECT_NE(message.find("com.microsoft::MatMulNBits"), std::string::npos);
    EXPECT_NE(message.find(with_g_idx ? "g_idx" : "A must be [..., K] with K = 64, got [2, 60]"), std::string::npos);
  }
}

// GatherBlockQuantized (quantized embeddings): an index out of range gives
// a row of zeros, as the op's description says (ONNX Runtime 1.30 refuses
// it, so its answers, the contrib_gather_block_quantized fixtures, cannot
// show it), in range the dequantized row; a float16 table of scales gives
// float16 rows; tables Kiln does not read are refused by name.
TEST(GatherBlockQuantized, IndicesOutOfRangeGiveZerosAndOtherTablesAreRefused) {
  // Row r of a 4-bit table of 32 values: codes r, r + 1, ... mod 16, one block, zero 8, scale 0.5.
  std::vector<uint8_t> bytes;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 16; ++i)
      bytes.push_back(static_cast<uint8_t>(((r + 2 * i) % 16) | (((r + 2 * i + 1) % 16) << 4)));
  auto model = [&](DType data_type, bool half_scales, const std::string& file) {
    kiln::testing::OnnxBuilder b;
    b.m.add_opset_import()->set_domain("com.microsoft");
    b.m.mutable_opset_import(1)->set_version(1);
    b.io(true, "ids", ::onnx::TensorProto::INT64, {4});
    b.init("data", data_type == DType::UInt8 ? from_vector(bytes, {3, 16}) : zeros({3, 16}, data_type));
    const Tensor scales = full({3, 1}, 0.5);
    b.init("scales", half_scales ? cast(scales, DType::Float16) : scales);
    auto* n = b.node("GatherBlockQuantized", {"data", "ids", "scales"}, {"rows"});
    n->set_domain("com.microsoft");
    kiln::testing::OnnxBuilder::integer(n, "block_size", 32);
    b.io(false, "rows", half_scales ? ::onnx::TensorProto::FLOAT16 : ::onnx::TensorProto::FLOAT, {4, 32});
    return b.save(file);
  };
  const Tensor rows =
      InferenceSession(model(DType::UInt8, false, "gbq.onnx")).run({from_vector<int64_t>({2, 3, -4, -1})})[0];
  ASSERT_EQ(rows.shape(), (Shape{4, 32}));
  const auto v = rows.to_vector<float>();
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(v[static_cast<size_t>(i)], 0.5f * static_cast<float>((2 + i) % 16 - 8)) << i;  // row 2
    EXPECT_EQ(v[static_cast<size_t>(32 + i)], 0.0f) << i;                                    // 3: out of range
    EXPECT_EQ(v[static_cast<size_t>(64 + i)], 0.0f) << i;                                    // -4: out of range
    EXPECT_EQ(v[static_cast<size_t>(96 + i)], v[static_cast<size_t>(i)]) << i;               // -1: row 2
  }
  const Tensor half =
      InferenceSession(model(DType::UInt8, true, "gbq_half.onnx")).run({from_vector<int64_t>({2, 0, 1, 2})})[0];
  EXPECT_EQ(half.dtype(), DType::Float16);
  EXPECT_EQ(cast(half, DType::Float32).to_vector<float>()[5], 0.5f * static_cast<float>(7 - 8));
  const std::string refused =
      message_of([&] { InferenceSession(model(DType::Int8, false, "gbq_int8.onnx")).run({zeros({4}, DType::Int64)}); });
  EXPECT_NE(refused.find("GatherBlockQuantized"), std::string::npos) << refused;
  EXPECT_NE(refused.find("data of type int8 is not supported (uint8 codes are"), std::string::npos) << refused;
}

// A float16 model (A, scales and bias in float16): computed in float32 and
// the result given back in float16, the float32 product rounded.
TEST(NbitsMatmul, Float16ModelsGiveTheFloat32ProductInFloat16) {
  const Weights w = random_weights(8, 64, 4, 32, false, 3);
  manual_seed(4);
  const Tensor a = cast(randn({3, 64}), DType::Float16), bias = cast(randn({8}), DType::Float16);
  kiln::testing::OnnxBuilder b;
  b.m.add_opset_import()->set_domain("com.microsoft");
  b.m.mutable_opset_import(1)->set_version(1);
  b.io(true, "A", ::onnx::TensorProto::FLOAT16, {3, 64});
  b.init("B", w.b);
  b.init("scales", cast(w.scales, DType::Float16).reshape({16}));
  b.init("bias", bias);
  auto* n = b.node("MatMulNBits", {"A", "B", "scales", "", "", "bias"}, {"Y"});
  n->set_domain("com.microsoft");
  kiln::testing::OnnxBuilder::integer(n, "K", 64);
  kiln::testing::OnnxBuilder::integer(n, "N", 8);
  kiln::testing::OnnxBuilder::integer(n, "block_size", 32);
  b.io(false, "Y", ::onnx::TensorProto::FLOAT16, {3, 8});
  const Tensor got = InferenceSession(b.save("nbits_float16.onnx")).run({a})[0];
  ASSERT_EQ(got.dtype(), DType::Float16);
  const Tensor want =
      cast(matmul_nbits(cast(a, DType::Float32), w.b, cast(cast(w.scales, DType::Float16), DType::Float32), Tensor(),
                        cast(bias, DType::Float32), 4, 32),
           DType::Float16);
  EXPECT_EQ(cast(got, DType::Float32).to_vector<float>(), cast(want, DType::Float32).to_vector<float>());
}

// A float MLP whose first weight two MatMuls share, with a last layer of
// K = 48 (a block cut short), as quantize_weights leaves it: every MatMul a
// MatMulNBits (the shared weight packed once), the float weights gone, the
// answer near the float one (closer with 8 bits than 4), Kiln's equal to
// ONNX Runtime's on the same file; a layer kept by name stays float.
TEST(NbitsMatmul, WeightOnlyQuantizationWritesMatMulNBitsThatKilnAndOnnxRuntimeRun) {
  kiln::testing::OnnxBuilder b;
  b.io(true, "x", ::onnx::TensorProto::FLOAT, {2, 64});
  manual_seed(11);
  b.init("w1", randn({64, 48}) * 0.2);
  b.init("b1", randn({48}) * 0.1);
  b.init("w2", randn({48, 10}) * 0.2);
  b.node("MatMul", {"x", "w1"}, {"h1"});
  b.node("MatMul", {"x", "w1"}, {"h1b"});
  b.node("Add", {"h1", "h1b"}, {"h2"});
  b.node("Add", {"h2", "b1"}, {"h3"});
  b.node("Relu", {"h3"}, {"h4"});
  b.node("MatMul", {"h4", "w2"}, {"y"});
  b.io(false, "y", ::onnx::TensorProto::FLOAT, {2, 10});
  const std::string float_path = b.save("mlp_float.onnx");
  std::string bytes;
  b.m.SerializeToString(&bytes);
  const Tensor x = randn({2, 64});
  const Tensor want = InferenceSession(float_path).run({x})[0];
  double errors[2] = {};
  for (const int64_t bits : {4, 8}) {
    SCOPED_TRACE(::testing::Message() << bits << " bits");
    WeightQuantizeOptions o;
    o.bits = bits;
    const QuantizeResult q = quantize_weights(bytes, o);
    ASSERT_EQ(q.report.layers.size(), 3u);
    EXPECT_EQ(q.report.quantized(), 3);
    ::onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(q.model));
    int nbits = 0;
    for (const auto& n : m.graph().node()) nbits += n.op_type() == "MatMulNBits" && n.domain() == "com.microsoft";
    EXPECT_EQ(nbits, 3);
    int codes = 0;
    for (const auto& t : m.graph().initializer()) {
      EXPECT_NE(t.name(), "w1");
      EXPECT_NE(t.name(), "w2");
      codes += t.name() == "w1_" + std::to_string(bits) + "bit";
    }
    EXPECT_EQ(codes, 1) << "the shared weight packed once";
    const std::string path =
        (std::filesystem::path(float_path).parent_path() / ("mlp_" + std::to_string(bits) + ".onnx")).string();
    q.save(path);
    const Tensor got = InferenceSession(path).run({x})[0];
    auto norm = [](const Tensor& t) { return std::sqrt(sum(t * t).item<float>()); };
    errors[bits / 8] = norm(got - want) / norm(want);
    EXPECT_LT(errors[bits / 8], bits == 4 ? 0.1 : 0.01);
    if (kiln::testing::ort_available()) {
      const Tensor ort = kiln::testing::run_ort(path, {{"x", x}}).outputs[0].second;
      EXPECT_LT(amax(abs(ort - got)).item<float>(), 1e-5 * amax(abs(ort)).item<float>() + 1e-6);
    }
  }
  EXPECT_LT(errors[1], errors[0] / 4) << "8 bits closer than 4";
  WeightQuantizeOptions keep;
  keep.keep_float = {"y"};
  keep.symmetric = true;
  const QuantizeResult kept = quantize_weights(bytes, keep);
  EXPECT_EQ(kept.report.quantized(), 2);
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(kept.model));
  bool w2_stays = false;
  for (const auto& t : m.graph().initializer()) w2_stays |= t.name() == "w2";
  EXPECT_TRUE(w2_stays);
  EXPECT_NE(kept.report.str().find("2 of 3 layers' weights quantized (4-bit weights in blocks of 32, symmetric)"),
            std::string::npos)
      << kept.report.str();
}

// With embeddings, a token table's Gather becomes GatherBlockQuantized
// (each row in blocks along the hidden axis) beside the MatMuls'
// MatMulNBits: the float table gone, the answer near the float one, Kiln's
// equal to ONNX Runtime's; a table whose rows are not whole blocks stays float.
TEST(NbitsMatmul, WeightOnlyQuantizationOfEmbeddingsWritesGatherBlockQuantized) {
  auto model = [](int64_t hidden) {
    kiln::testing::OnnxBuilder b;
    b.io(true, "ids", ::onnx::TensorProto::INT64, {2, 5});
    manual_seed(12);
    b.init("table", randn({40, hidden}) * 0.5);
    b.init("w", randn({hidden, 16}) * 0.2);
    b.node("Gather", {"table", "ids"}, {"embedded"});
    b.node("MatMul", {"embedded", "w"}, {"y"});
    b.io(false, "y", ::onnx::TensorProto::FLOAT, {2, 5, 16});
    std::string bytes;
    b.m.SerializeToString(&bytes);
    return std::make_pair(b.save("embedding_" + std::to_string(hidden) + ".onnx"), bytes);
  };
  const auto [float_path, bytes] = model(64);
  const Tensor ids = from_vector<int64_t>({0, 5, 39, 7, 7, 12, 3, 38, 1, 20}, {2, 5});
  const Tensor want = InferenceSession(float_path).run({ids})[0];
  WeightQuantizeOptions o;
  o.embeddings = true;
  const QuantizeResult q = quantize_weights(bytes, o);
  EXPECT_EQ(q.report.quantized(), 2);
  ::onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(q.model));
  std::vector<std::string> types;
  for (const auto& n : m.graph().node()) types.push_back(n.op_type());
  EXPECT_EQ(types, (std::vector<std::string>{"GatherBlockQuantized", "MatMulNBits"}));
  for (const auto& t : m.graph().initializer()) EXPECT_NE(t.name(), "table");
  const std::string path = (std::filesystem::path(float_path).parent_path() / "embedding_4bit.onnx").string();
  q.save(path);
  const Tensor got = InferenceSession(path).run({ids})[0];
  auto norm = [](const Tensor& t) { return std::sqrt(sum(t * t).item<float>()); };
  EXPECT_LT(norm(got - want) / norm(want), 0.15);
  if (kiln::testing::ort_available()) {
    const Tensor ort = kiln::testing::run_ort(path, {{"ids", ids}}).outputs[0].second;
    EXPECT_LT(amax(abs(ort - got)).item<float>(), 1e-5 * amax(abs(ort)).item<float>() + 1e-6);
  }
  const QuantizeResult partial = quantize_weights(model(48).second, o);  // 48 values a row: not whole blocks of 32
  EXPECT_EQ(partial.report.quantized(), 1);
  ASSERT_TRUE(m.ParseFromString(partial.model));
  EXPECT_EQ(m.graph().node(0).op_type(), "Gather");
}

TEST(NbitsMatmul, WeightOnlyQuantizationSaysWhatItCannotDo) {
  kiln::testing::OnnxBuilder b;
  b.io(true, "x", ::onnx::TensorProto::FLOAT, {2, 4});
  b.node("Relu", {"x"}, {"y"});
  b.io(false, "y", ::onnx::TensorProto::FLOAT, {2, 4});
  std::string bytes;
  b.m.SerializeToString(&bytes);
  EXPECT_NE(message_of([&] { quantize_weights(bytes); }).find("no MatMul with constant float32 weights [K, N]"),
            std::string::npos);
  WeightQuantizeOptions o;
  o.bits = 3;
  EXPECT_NE(message_of([&] { quantize_weights(bytes, o); }).find("bits must be 2, 4 or 8, got 3"), std::string::npos);
}

}  // namespace

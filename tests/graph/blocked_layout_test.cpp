// Inference graphs of ShuffleNet's and SqueezeNet's shapes on blocked
// activations: channel shuffles, channel halves and concatenations run as
// blocks, with no reorder to plain and back, and compute what eager mode does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/onednn_conv.h"
#include "kiln/kiln.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

void expect_close(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to(DType::Float64).to_vector<double>(), y = b.to(DType::Float64).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], y[i], 1e-4 + 1e-4 * std::abs(y[i])) << "at " << i;
}

// x [N, C, H, W] -> channel i * groups + k is x's channel k * (C / groups) + i,
// written as PyTorch's ShuffleNet and its ONNX export have it.
Tensor channel_shuffle(const Tensor& x, int64_t groups) {
  const Shape& s = x.shape();
  return x.view({s[0], groups, s[1] / groups, s[2], s[3]}).permute({0, 2, 1, 3, 4}).contiguous().view(s);
}

using kiln::testing::count;

// A program compiled for inference (fixed rules, no timed choices) and run
// next to its eager run on the same input.
struct Compared {
  std::vector<Tensor> got, want;
  std::string graph, report;
};

Compared compile_and_run(const jit::Function& program, const Tensor& x) {
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;
  auto fn = jit::compile(program, {x}, o);
  Compared c{fn({x}), {}, fn.graph_text(), fn.report().str()};
  NoGradGuard no_grad;
  c.want = program({x});
  return c;
}

// Two ShuffleNetV2 units: a down-sampling one (both branches from the whole
// input, concatenated and shuffled) and a basic one (the shuffled channels
// split in halves, one half through a branch, concatenated and shuffled
// again), then a shuffle in 4 groups, which takes the general path.
TEST(BlockedLayout, ShuffleNetUnitsShuffleChannelsAsBlocks) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  const int64_t c = 2 * b;  // each branch's channels
  manual_seed(21);
  Tensor stem = randn({c, 3, 3, 3}) * 0.3, left = randn({c, c, 1, 1}) * 0.2, right = randn({c, c, 1, 1}) * 0.2,
         inner = randn({c, c, 1, 1}) * 0.2, head = randn({2 * c, 2 * c, 1, 1}) * 0.2;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor x = relu(conv2d(in[0], stem, Tensor(), pad1));
    Tensor y = channel_shuffle(concat({relu(conv2d(x, left, Tensor())), relu(conv2d(x, right, Tensor()))}, 1), 2);
    Tensor kept = y.slice(1, 0, c), branch = relu(conv2d(y.slice(1, c, 2 * c), inner, Tensor()));
    y = channel_shuffle(concat({kept, branch}, 1), 2);
    y = channel_shuffle(relu(conv2d(y, head, Tensor())), 4);
    return std::vector<Tensor>{y};
  };
  for (int64_t batch : {1, 3}) {
    Tensor x = randn({batch, 3, 9, 7});
    const Compared run = compile_and_run(program, x);
    const std::string& graph = run.graph;
    EXPECT_EQ(count(graph, "channel_shuffle[nChw"), 3u) << graph;
    EXPECT_EQ(graph.find("permute"), std::string::npos) << graph;
    EXPECT_EQ(graph.find("concat"), std::string::npos) << "the shuffles read the branches:\n" << graph;
    EXPECT_EQ(graph.find("slice"), std::string::npos) << "the shuffle writes the halves:\n" << graph;
    EXPECT_EQ(count(graph, "reorder["), 1u) << "only the result goes back to plain:\n" << graph;
    EXPECT_NE(run.report.find("3 channel shuffles of them"), std::string::npos) << run.report;
    expect_close(run.got[0], run.want[0]);
  }
}

// A shuffle whose result is also read whole keeps its slices as blocked
// copies; one whose input is a graph input is left to the plain ops.
TEST(BlockedLayout, ChannelHalvesOfABlockedShuffleAreBlockedSlices) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(22);
  Tensor w = randn({2 * b, 3, 1, 1}), half = randn({b, b, 1, 1}) * 0.3, whole = randn({b, 2 * b, 1, 1}) * 0.3;
  auto program = [&](const std::vector<Tensor>& in) {
    Tensor y = channel_shuffle(conv2d(in[0], w, Tensor()), 2);
    Tensor a = conv2d(y.slice(1, b, 2 * b), half, Tensor()), d = conv2d(y, whole, Tensor());
    return std::vector<Tensor>{a + d, channel_shuffle(concat({in[0], in[0]}, 1), 2)};
  };
  Tensor x = randn({2, 3, 5, 6});
  const Compared run = compile_and_run(program, x);
  const std::string& graph = run.graph;
  EXPECT_EQ(count(graph, "channel_shuffle[nChw"), 1u) << graph;
  EXPECT_EQ(count(graph, "slice[nChw"), 1u) << graph;
  for (size_t i = 0; i < run.got.size(); ++i) expect_close(run.got[i], run.want[i]);
}

// SqueezeNet's fire module at batch 1: the two expand convolutions write
// their halves of the concatenation in place; at batch 2 the halves are not
// contiguous, and the blocked concatenation stays.
TEST(BlockedLayout, OneImageConcatenationsAreWrittenInPlace) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(23);
  Tensor squeeze = randn({b, 3, 1, 1}), expand1 = randn({2 * b, b, 1, 1}) * 0.3, expand3 = randn({b, b, 3, 3}) * 0.1,
         next = randn({b, 3 * b, 1, 1}) * 0.2;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor s = relu(conv2d(in[0], squeeze, Tensor()));
    Tensor y = concat({relu(conv2d(s, expand1, Tensor())), relu(conv2d(s, expand3, Tensor(), pad1))}, 1);
    y = max_pool2d(y, {3, 3}, {2, 2}, {1, 1});
    return std::vector<Tensor>{conv2d(y, next, Tensor())};
  };
  for (int64_t batch : {1, 2}) {
    Tensor x = randn({batch, 3, 11, 12});
    const Compared run = compile_and_run(program, x);
    const std::string& graph = run.graph;
    EXPECT_EQ(count(graph, "into concat"), batch == 1 ? 2u : 0u) << graph;
    EXPECT_EQ(count(graph, "concat[nChw"), batch == 1 ? 0u : 1u) << graph;
    expect_close(run.got[0], run.want[0]);
  }
}

// Residual adds folded into convolutions without bias: the shortcut is read
// blocked where the output accumulates (an omitted bias input once shifted
// it to the bias's place, and it was read plain), and a shortcut that is
// the convolution's own input keeps its buffer (y = relu(conv(x) + x)).
TEST(BlockedLayout, ResidualsIntoConvolutionsWithoutBias) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(24);
  Tensor w1 = randn({b, 3, 3, 3}) * 0.3, w2 = randn({b, b, 3, 3}) * 0.1, w3 = randn({b, b, 3, 3}) * 0.1;
  ConvOptions pad1;
  pad1.padding = {1, 1};
  auto basic_block = [&](const std::vector<Tensor>& in) {
    Tensor x = relu(conv2d(in[0], w1, Tensor(), pad1));
    Tensor h = relu(conv2d(x, w2, Tensor(), pad1));
    return std::vector<Tensor>{relu(conv2d(h, w3, Tensor(), pad1) + x)};
  };
  auto own_input = [&](const std::vector<Tensor>& in) {
    Tensor x = relu(conv2d(in[0], w1, Tensor(), pad1));
    return std::vector<Tensor>{relu(conv2d(x, w2, Tensor(), pad1) + x)};
  };
  for (const jit::Function& program : {jit::Function(basic_block), jit::Function(own_input)}) {
    Tensor x = randn({1, 3, 8, 8});
    const Compared run = compile_and_run(program, x);
    const std::string& graph = run.graph;
    EXPECT_NE(graph.find("+ residual"), std::string::npos) << graph;
    EXPECT_EQ(count(graph, "reorder["), 1u) << graph;
    expect_close(run.got[0], run.want[0]);
  }
}

// MobileNetV3's squeeze-and-excitation: the pooled [N, C, 1, 1] vector is
// the same memory plain and blocked, so the convolutions on it read it with
// no reorder, the hard-sigmoid runs inside the convolution before it (as the
// hard-swish does), and the scale multiplies the blocked activations.
TEST(BlockedLayout, ChannelVectorsNeedNoReorder) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(25);
  Tensor expand = randn({2 * b, 3, 3, 3}) * 0.3, squeeze = randn({b, 2 * b, 1, 1}) * 0.3,
         excite = randn({2 * b, b, 1, 1}) * 0.3, project = randn({b, 2 * b, 1, 1}) * 0.3;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = hardswish(conv2d(in[0], expand, Tensor(), pad1));
    Tensor s = relu(conv2d(adaptive_avg_pool2d(y, {1, 1}), squeeze, Tensor()));
    y = y * hardsigmoid(conv2d(s, excite, Tensor()));
    return std::vector<Tensor>{conv2d(y, project, Tensor())};
  };
  for (int64_t batch : {1, 2}) {
    Tensor x = randn({batch, 3, 7, 9});
    const Compared run = compile_and_run(program, x);
    const std::string& graph = run.graph;
    EXPECT_NE(graph.find("global_avg_pool[nChw"), std::string::npos) << graph;
    EXPECT_NE(graph.find("per channel]"), std::string::npos) << graph;
    EXPECT_NE(graph.find("+ hardswish"), std::string::npos) << graph;
    EXPECT_NE(graph.find("+ hardsigmoid"), std::string::npos) << graph;
    EXPECT_EQ(graph.find("= hardsigmoid"), std::string::npos) << graph;
    EXPECT_EQ(count(graph, "reorder["), 1u) << "only the result goes back to plain:\n" << graph;
    expect_close(run.got[0], run.want[0]);
  }
}

// MobileNetV3's 40-channel bottleneck between 16-channel-blocked layers: on
// a machine whose block is 16, the 40 channels sit in 8-channel blocks, and
// the 1x1 convolutions from one block size to the other (which oneDNN has
// no kernel for) run on Kiln's own GEMM, with the hard-swish and the
// residual add in it: nothing goes plain before the result. Timed choices
// on, as in deployment (Kiln's kernels are chosen by timing).
TEST(BlockedLayout, OneByOneConvolutionsCrossBlockSizes) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(27);
  Tensor stem = randn({16, 3, 3, 3}) * 0.3, narrow = randn({40, 16, 1, 1}) * 0.3, wide = randn({96, 40, 1, 1}) * 0.3,
         back = randn({40, 96, 1, 1}) * 0.3, out = randn({32, 40, 1, 1}) * 0.3, bias = randn({96});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = hardswish(conv2d(in[0], stem, Tensor(), pad1));
    Tensor a = conv2d(y, narrow, Tensor());
    Tensor e = hardswish(conv2d(a, wide, bias));
    Tensor r = conv2d(e, back, Tensor()) + a;
    return std::vector<Tensor>{conv2d(r, out, Tensor())};
  };
  for (int64_t batch : {1, 2}) {
    Tensor x = randn({batch, 3, 9, 11});
    jit::CompileOptions o;
    o.inference = true;
    auto fn = jit::compile(program, {x}, o);
    const std::string graph = fn.graph_text();
    EXPECT_EQ(count(graph, "reorder["), 1u) << "only the result goes back to plain:\n" << graph;
    EXPECT_NE(graph.find("+ hardswish"), std::string::npos) << graph;
    EXPECT_NE(graph.find("+ residual"), std::string::npos) << graph;
    if (b == 16) {
      EXPECT_NE(graph.find("conv2d[nChw16c -> nChw8c]"), std::string::npos) << graph;
    }
    // The layouts are in the IR: the 40 channels' values say nChw8c, and the
    // kernels made by the CPU's passes say whose they are.
    EXPECT_NE(graph.find("float32[" + std::to_string(batch) + ", 40, 9, 11] nChw8c"), std::string::npos) << graph;
    EXPECT_NE(graph.find("# cpu kernel"), std::string::npos) << graph;
    NoGradGuard no_grad;
    expect_close(fn({x})[0], program({x})[0]);
  }
}

}  // namespace

namespace {

// A U-Net's first level: a 3x3 convolution (the skip connection) and, below
// a 2x2 max pool, one of twice the channels; returns both.
struct UNetLevel {
  Tensor down, deep;
  explicit UNetLevel(int64_t b) : down(randn({b, 3, 3, 3}) * 0.3), deep(randn({2 * b, b, 3, 3}) * 0.1) {}
  std::pair<Tensor, Tensor> operator()(const Tensor& x) const {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor skip = relu(conv2d(x, down, Tensor(), pad1));
    return {skip, relu(conv2d(max_pool2d(skip, {2, 2}, {2, 2}), deep, Tensor(), pad1))};
  }
};

// A U-Net's decoder at batch 2: the upsampled activations (bilinear and
// nearest, 2x and to an odd size) stay blocked, so the concatenation with the
// skip connection is blocked too and nothing goes plain before the result.
TEST(BlockedLayout, UpsamplingsAndTheirConcatenationStayBlocked) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(26);
  const UNetLevel level(b);
  Tensor head = randn({b, 5 * b, 1, 1}) * 0.2;
  for (const std::string mode : {"bilinear", "nearest"}) {
    for (const bool odd : {false, true}) {
      auto program = [&](const std::vector<Tensor>& in) {
        auto [skip, low] = level(in[0]);
        Tensor up = odd ? interpolate(low, {skip.size(2), skip.size(3)}, mode) : interpolate(low, 2.0, mode);
        Tensor half = interpolate(skip, 0.5, mode);  // downsampling too
        Tensor back = interpolate(half, {skip.size(2), skip.size(3)}, mode);
        return std::vector<Tensor>{conv2d(concat({skip, up, back, back}, 1), head, Tensor())};
      };
      Tensor x = randn({2, 3, odd ? 14 : 12, odd ? 10 : 16});
      const Compared run = compile_and_run(program, x);
      const std::string& graph = run.graph;
      EXPECT_EQ(count(graph, "interpolate[nChw"), 3u) << graph;
      EXPECT_EQ(count(graph, "concat[nChw"), 1u) << graph;
      EXPECT_EQ(count(graph, "reorder["), 1u) << "only the result goes back to plain:\n" << graph;
      expect_close(run.got[0], run.want[0]);
    }
  }
}

// The same decoder at batch 1: the upsampling and the skip connection's
// convolution write their parts of the concatenation in place, and the max
// pool that also reads the skip connection reads it as a view of its part.
// A concatenation naming one value twice keeps its copy.
TEST(BlockedLayout, AUNetsConcatenationIsWrittenInPlaceAndItsSkipReadAsAView) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(27);
  const UNetLevel level(b);
  Tensor head = randn({b, 3 * b, 1, 1}) * 0.2;
  for (const bool twice : {false, true}) {
    auto program = [&](const std::vector<Tensor>& in) {
      auto [skip, low] = level(in[0]);
      Tensor up = interpolate(low, 2.0, "bilinear");
      Tensor both = twice ? concat({up, skip, skip}, 1).slice(1, 0, 3 * b) : concat({up, skip}, 1);
      return std::vector<Tensor>{conv2d(both, head, Tensor())};
    };
    Tensor x = randn({1, 3, 12, 16});
    const Compared run = compile_and_run(program, x);
    const std::string& graph = run.graph;
    EXPECT_EQ(count(graph, "into concat"), twice ? 0u : 2u) << graph;
    EXPECT_EQ(count(graph, "concat[nChw"), twice ? 1u : 0u) << graph;
    EXPECT_EQ(count(graph, "reorder["), 1u) << "only the result goes back to plain:\n" << graph;
    expect_close(run.got[0], run.want[0]);
  }
}

}  // namespace

namespace {

// A DenseNet block and transition: each layer's batch norm and ReLU read
// the concatenation of everything before it, the block's plain input among
// blocked convolution outputs; the transition pads by nothing before its
// pool, as torch.onnx.export writes it. The block stays blocked: the batch
// norms are per-channel scales on the blocks with their ReLU folded in, the
// plain input is reordered once for all the concatenations, the pool runs
// on blocks and the pad goes.
TEST(BlockedLayout, DenseBlocksStayBlockedThroughBatchNormsConcatenationsAndPools) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(31);
  const int64_t c0 = 2 * b, growth = b;
  struct Norm {
    Tensor weight, bias, mean, var;
  };
  auto norm = [](int64_t c) { return Norm{rand({c}) + 0.5, randn({c}) * 0.1, randn({c}) * 0.1, rand({c}) + 0.5}; };
  std::vector<Norm> norms;
  std::vector<Tensor> convs;
  for (int layer = 0; layer < 3; ++layer) {
    norms.push_back(norm(c0 + layer * growth));
    convs.push_back(randn({growth, c0 + layer * growth, 3, 3}) * 0.1);
  }
  const Norm last = norm(c0 + 3 * growth);
  Tensor transition = randn({c0, c0 + 3 * growth, 1, 1}) * 0.1;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    std::vector<Tensor> features = {in[0]};
    auto joined = [&] { return features.size() == 1 ? features[0] : concat(features, 1); };
    for (size_t layer = 0; layer < convs.size(); ++layer) {
      const Norm& n = norms[layer];
      Tensor x = relu(batch_norm(joined(), n.weight, n.bias, n.mean, n.var, false, 0.1, 1e-5));
      features.push_back(conv2d(x, convs[layer], Tensor(), pad1));
    }
    Tensor x = relu(batch_norm(joined(), last.weight, last.bias, last.mean, last.var, false, 0.1, 1e-5));
    x = pad(conv2d(x, transition, Tensor()), {0, 0, 0, 0});
    return std::vector<Tensor>{avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}, false)};
  };
  Tensor x = randn({1, c0, 10, 10});
  const Compared run = compile_and_run(program, x);
  const std::string& graph = run.graph;
  EXPECT_EQ(count(graph, "batch_norm[nChw"), 3u) << graph;
  EXPECT_EQ(count(graph, "] + relu"), 3u) << graph;
  EXPECT_EQ(count(graph, "concat[nChw"), 3u) << graph;
  // The block's input, once for every concatenation, and the first layer's
  // plain ReLU output for its convolution.
  EXPECT_EQ(count(graph, "reorder[nchw ->"), 2u) << graph;
  EXPECT_EQ(count(graph, "avg_pool2d[nChw"), 1u) << graph;
  EXPECT_EQ(count(graph, "pad("), 0u) << graph;
  expect_close(run.got[0], run.want[0]);
}

}  // namespace

namespace {

// Depthwise 3x3 convolutions on plain planes (ShuffleNet x1.0's 58 and 116
// channels fill no block): every plane size from under one vector to over
// two, strides 1 and 2, paddings 0 to 2, with and without bias, against
// float64; compiled with a ReLU after, NaN passes it.
TEST(PlainDepthwise, ThreeByThreeMatchesFloat64) {
  manual_seed(39);
  for (const int64_t size : {3, 14, 16, 17, 33})
  for (const int64_t stride : {1, 2})
  for (const int64_t padding : {0, 1, 2}) {
    if (size + 2 * padding < 3) continue;
    SCOPED_TRACE(::testing::Message() << size << "x" << size + 1 << " stride " << stride << " padding " << padding);
    const Tensor x = randn({2, 5, size, size + 1}), w = randn({5, 1, 3, 3}), b = randn({5});
    ConvOptions o;
    o.stride = {stride, stride};
    o.padding = {padding, padding};
    o.groups = 5;
    for (const bool bias : {false, true}) {
      const Tensor got = conv2d(x, w, bias ? b : Tensor(), o);
      const Tensor want = conv2d(x.to(DType::Float64), w.to(DType::Float64), bias ? b.to(DType::Float64) : Tensor(), o);
      expect_close(got, want);
    }
  }
  const Tensor w = randn({58, 1, 3, 3}), b = randn({58});
  ConvOptions o;
  o.padding = {1, 1};
  o.groups = 58;
  auto program = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{relu(conv2d(in[0], w, b, o))}; };
  Tensor x = randn({1, 58, 14, 14});
  x.data<float>()[15] = std::nanf("");
  const Compared run = compile_and_run(program, x);
  const std::vector<float> got = run.got[0].to_vector<float>(), want = run.want[0].to_vector<float>();
  EXPECT_TRUE(std::isnan(got[0])) << "the NaN's window";
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "at " << i;
    if (!std::isnan(want[i])) {
      ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "at " << i;
    }
  }
}

// MobileNetV2's inverted residual with ReLU6 (exported as Clip(0, 6)): the
// clamps after the expansion and the depthwise convolution become their
// ReLU and cap, with no clamp of their own; NaN passes as through the ops.
TEST(Relu6, ClampsAfterConvolutionsBecomeTheirEpilogue) {
  manual_seed(40);
  const int64_t c = 16, e = 96;
  Tensor expand = randn({e, c, 1, 1}) * 0.5, depthwise = randn({e, 1, 3, 3}) * 0.5, project = randn({c, e, 1, 1}) * 0.2;
  Tensor b1 = randn({e}), b2 = randn({e});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions dw;
    dw.padding = {1, 1};
    dw.groups = e;
    Tensor y = clamp(conv2d(in[0], expand, b1), 0.0, 6.0);
    y = clamp(conv2d(y, depthwise, b2, dw), 0.0, 6.0);
    return std::vector<Tensor>{in[0] + conv2d(y, project, Tensor())};
  };
  Tensor x = randn({1, c, 14, 14}) * 3.0;
  x.data<float>()[20] = std::nanf("");
  const Compared run = compile_and_run(program, x);
  EXPECT_EQ(count(run.graph, "+ relu6"), 2u) << run.graph;
  EXPECT_EQ(count(run.graph, "clamp"), 0u) << run.graph;
  const std::vector<float> got = run.got[0].to_vector<float>(), want = run.want[0].to_vector<float>();
  size_t nans = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << "at " << i;
    nans += std::isnan(got[i]);
    if (!std::isnan(want[i])) {
      ASSERT_NEAR(got[i], want[i], 1e-4 + 1e-4 * std::abs(want[i])) << "at " << i;
    }
  }
  EXPECT_GT(nans, 0u) << "the NaN reaches the output";
}

// An Inception branch as PyTorch exports it: avg_pool2d(padding=1) as a zero
// pad, then a pool without padding. The pad becomes the pool's padding,
// counted in its averages, and the pool runs blocked between the
// convolutions; a pad of another value, or one read elsewhere too, stays.
TEST(PaddedPools, AZeroPadBeforeAnAveragePoolBecomesItsPadding) {
  manual_seed(38);
  Tensor w1 = randn({16, 8, 3, 3}), w2 = randn({16, 16, 1, 1});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    const Tensor x = relu(conv2d(in[0], w1, Tensor(), pad1));
    const Tensor pooled = avg_pool2d(pad(x, {1, 1, 1, 1}), {3, 3}, {1, 1});
    const Tensor other = avg_pool2d(pad(x, {1, 1, 1, 1}, "constant", 1.0), {3, 3}, {1, 1});
    const Tensor shared = pad(x, {2, 2, 2, 2});
    return std::vector<Tensor>{conv2d(pooled, w2, Tensor()), other, avg_pool2d(shared, {5, 5}, {1, 1}), shared};
  };
  Tensor x = randn({1, 8, 12, 11});
  const Compared run = compile_and_run(program, x);
  EXPECT_NE(run.report.find("1 zero paddings into the average pools after them"), std::string::npos) << run.report;
  EXPECT_EQ(count(run.graph, "avg_pool2d[nChw"), 1u) << run.graph;
  for (size_t i = 0; i < run.got.size(); ++i) expect_close(run.got[i], run.want[i]);
}

// Atrous convolutions whose dilation reaches past a small input (DeepLab's
// pyramid on 14x14 features): the taps that only ever read padding go, and
// the convolution computes the same with the ones left (a 1x1 where only
// the centre reaches), while one whose every tap reads the input keeps them.
TEST(DilatedConvolutions, TapsThatOnlyReadPaddingGo) {
  manual_seed(37);
  Tensor far = randn({8, 6, 3, 3}), near = randn({8, 6, 3, 3}), strided = randn({8, 6, 5, 5});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions o24, o4, o9;
    o24.padding = {24, 24};
    o24.dilation = {24, 24};
    o4.padding = {4, 4};
    o4.dilation = {4, 4};
    o9.padding = {18, 18};
    o9.dilation = {9, 9};
    o9.stride = {2, 2};
    return std::vector<Tensor>{conv2d(in[0], far, Tensor(), o24), conv2d(in[0], near, Tensor(), o4),
                               conv2d(in[0], strided, Tensor(), o9)};
  };
  Tensor x = randn({1, 6, 14, 13});
  const Compared run = compile_and_run(program, x);
  EXPECT_NE(run.report.find("narrowed 2 dilated convolutions"), std::string::npos) << run.report;
  for (size_t i = 0; i < run.got.size(); ++i) expect_close(run.got[i], run.want[i]);
}

}  // namespace

namespace {

// SiLU after a convolution, as exported (y * sigmoid(y)), becomes the
// convolution's swish epilogue; one whose y is read elsewhere too stays.
TEST(BlockedLayout, SiluAfterAConvolutionIsItsEpilogue) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(41);
  Tensor w1 = randn({2 * b, b, 3, 3}) * 0.2, w2 = randn({2 * b, 2 * b, 1, 1}) * 0.2, w3 = randn({b, 2 * b, 1, 1}) * 0.2;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = conv2d(in[0], w1, Tensor(), pad1);
    y = y * sigmoid(y);
    Tensor z = conv2d(y, w2, Tensor());
    Tensor shared = z * sigmoid(z) + z;  // z is read by the sum too
    return std::vector<Tensor>{conv2d(shared, w3, Tensor())};
  };
  Tensor x = randn({1, b, 9, 9});
  const Compared run = compile_and_run(program, x);
  EXPECT_EQ(count(run.graph, " + silu"), 1u) << run.graph;
  expect_close(run.got[0], run.want[0]);
}

}  // namespace

namespace {

// A 1-d convolution network as the runtime reads one (each convolution and
// pool lifted to 2-d between views, its ReLU on the 3-d value): the views
// around the ReLUs and each other fold away, so the convolutions, ReLUs and
// pool stay blocked from one convolution to the next.
TEST(BlockedLayout, OneDimensionalConvolutionsStayBlockedAcrossTheirViews) {
  const int64_t b = cpu::onednn::preferred_block();
  if (b == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(43);
  Tensor w1 = randn({b, 1, 1, 9}) * 0.3, w2 = randn({2 * b, b, 1, 3}) * 0.2, w3 = randn({2 * b, 2 * b, 1, 3}) * 0.2;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad;
    pad.padding = {0, 1};
    auto conv1d = [&](const Tensor& x, const Tensor& w, const ConvOptions& o) {
      const Shape& s = x.shape();
      Tensor y = conv2d(x.view({s[0], s[1], 1, s[2]}), w, Tensor(), o);
      return y.view({y.shape()[0], y.shape()[1], y.shape()[3]});
    };
    Tensor x = relu(conv1d(in[0], w1, ConvOptions{}));
    x = relu(conv1d(x, w2, pad));
    const Shape& s = x.shape();
    x = max_pool2d(x.view({s[0], s[1], 1, s[2]}), {1, 4});
    x = x.view({x.shape()[0], x.shape()[1], x.shape()[3]});
    return std::vector<Tensor>{relu(conv1d(x, w3, pad))};
  };
  Tensor x = randn({1, 1, 200});
  const Compared run = compile_and_run(program, x);
  EXPECT_NE(run.report.find("pairs of views"), std::string::npos) << run.report;
  EXPECT_EQ(count(run.graph, "reorder[nChw"), 1u) << "only the output goes back to plain: " << run.graph;
  EXPECT_EQ(count(run.graph, "reorder[nchw"), 0u) << run.graph;
  EXPECT_EQ(count(run.graph, "= view("), 2u) << "the input's and the output's: " << run.graph;
  expect_close(run.got[0], run.want[0]);
}

}  // namespace

namespace {
using namespace kiln;

// An inference program compiled with fixed rules (so every compile makes
// the same choices) and these dynamic axes, called on each input with eager
// mode's answer; the compiled function, for its compiles and report.
jit::CompiledFunction run_like_eager(const jit::Function& program, std::vector<jit::DynamicAxis> dynamic,
                                     const std::vector<Tensor>& inputs) {
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;
  o.dynamic = std::move(dynamic);
  auto fn = jit::compile(program, {}, o);
  for (const Tensor& x : inputs) {
    SCOPED_TRACE("input " + x.meta_str());
    const Tensor got = fn({x})[0];
    NoGradGuard no_grad;
    expect_close(got, program({x})[0]);
  }
  return fn;
}

// An inference CNN with a dynamic batch: blocked convolutions on weights
// prepared once, the first layer's convolution with its ReLU and pool, a
// pool and a classifier read blocked. One graph serves every batch size but
// 1, which compiles its own (a size views treat as special).
TEST(BlockedLayout, AnInferenceCnnIsSymbolicInItsBatch) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(23);
  const Tensor w1 = randn({16, 1, 3, 3}) * 0.3, b1 = randn({16}) * 0.1, w2 = randn({32, 16, 3, 3}) * 0.1,
               b2 = randn({32}) * 0.1, w3 = randn({10, 32 * 4 * 4}) * 0.05;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = max_pool2d(relu(conv2d(in[0], w1, b1, pad1)), {2, 2});  // 16 -> 8
    y = max_pool2d(relu(conv2d(y, w2, b2, pad1)), {2, 2});              // 8 -> 4
    return std::vector<Tensor>{linear(y.flatten(1), w3)};
  };
  std::vector<Tensor> inputs;
  for (int64_t n : {5, 3, 9, 1, 6}) inputs.push_back(randn({n, 1, 16, 16}));
  const auto fn = run_like_eager(program, {{0, 0}}, inputs);
  EXPECT_EQ(fn.compiles(), 2) << fn.report().str();
  EXPECT_TRUE(fn.report().instantiated) << fn.report().str();
}

// With a dynamic batch, convolutions that have algorithms to choose from
// choose per size class of the batch as they run (timed there; pinned here
// to each algorithm in turn by KILN_CONV_ALGORITHM, so that every path runs):
// a 3x3 with its ReLU and 2x2 pool, one with a residual add, a 1x1. One
// compile serves every batch size, each with eager mode's answer.
TEST(BlockedLayout, ADynamicBatchChoosesConvolutionAlgorithmsAsItRuns) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(47);
  const Tensor w1 = randn({32, 16, 3, 3}) * 0.1, b1 = randn({32}) * 0.1, w2 = randn({32, 32, 3, 3}) * 0.1,
               w3 = randn({16, 32, 1, 1}) * 0.2;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    const Tensor y = max_pool2d(relu(conv2d(in[0], w1, b1, pad1)), {2, 2}, {2, 2});  // 24 -> 12
    const Tensor z = relu(conv2d(y, w2, Tensor(), pad1) + y);
    return std::vector<Tensor>{conv2d(z, w3, Tensor())};
  };
  std::vector<Tensor> inputs;
  for (int64_t n : {1, 5, 2, 16, 1}) inputs.push_back(randn({n, 16, 24, 24}));
  for (const char* algorithm : {"", "direct", "winograd2x2", "winograd4x4", "patch_gemm"}) {
    SCOPED_TRACE(std::string("KILN_CONV_ALGORITHM=") + algorithm);
    ::setenv("KILN_CONV_ALGORITHM", algorithm, 1);
    jit::CompileOptions o;
    o.inference = true;
    o.dynamic = {{0, 0}};
    auto fn = jit::compile(program, {}, o);
    for (const Tensor& x : inputs) {
      const Tensor got = fn({x})[0];
      NoGradGuard no_grad;
      expect_close(got, program({x})[0]);
    }
    ::unsetenv("KILN_CONV_ALGORITHM");
    const std::string graph = fn.graph_text();
    EXPECT_EQ(fn.compiles(), 1) << fn.report().str();
    EXPECT_EQ(count(graph, "(algorithm by batch size)"), 3u) << graph;
    EXPECT_EQ(count(graph, "+ relu + max_pool2d (algorithm by batch size)"), 1u) << graph;
    EXPECT_EQ(count(graph, "+ residual + relu (algorithm by batch size)"), 1u) << graph;
    EXPECT_EQ(count(graph, "max_pool2d[nChw"), 0u) << "the pool runs in the convolution:\n" << graph;
  }
}

// A MobileNet block (a 1x1 expansion, a 3x3 depthwise layer with its ReLU6,
// a 1x1 projection and the residual add) with the depthwise layer on Kiln's
// blocked kernel (pinned, as timing may choose oneDNN's): eager mode's
// answer at a fixed batch and, with a dynamic one, at each batch size, the
// kernel chosen there by size class.
TEST(BlockedLayout, ADepthwiseConvolutionRunsOnKilnsBlockedKernel) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(48);
  const Tensor w1 = randn({64, 16, 1, 1}) * 0.2, b1 = randn({64}) * 0.1, wd = randn({64, 1, 3, 3}) * 0.3,
               bd = randn({64}) * 0.1, w2 = randn({16, 64, 1, 1}) * 0.1;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions depthwise;
    depthwise.padding = {1, 1};
    depthwise.groups = 64;
    const Tensor e = relu(conv2d(in[0], w1, b1));
    const Tensor d = clamp(conv2d(e, wd, bd, depthwise), 0.0, 6.0);
    return std::vector<Tensor>{conv2d(d, w2, Tensor()) + in[0]};
  };
  ::setenv("KILN_CONV_ALGORITHM", "depthwise", 1);
  jit::CompileOptions o;
  o.inference = true;
  const Tensor x = randn({2, 16, 40, 36});
  auto fixed = jit::compile(program, {x}, o);
  const Tensor got = fixed({x})[0];
  o.dynamic = {{0, 0}};
  auto dynamic = jit::compile(program, {}, o);
  std::vector<Tensor> inputs, outputs;
  for (int64_t n : {1, 3, 1}) inputs.push_back(randn({n, 16, 14, 14}));
  for (const Tensor& input : inputs) outputs.push_back(dynamic({input})[0]);
  ::unsetenv("KILN_CONV_ALGORITHM");
  NoGradGuard no_grad;
  expect_close(got, program({x})[0]);
  const std::string graph = fixed.graph_text();
  EXPECT_EQ(count(graph, "+ relu6 (depthwise)"), 1u) << graph;
  EXPECT_NE(fixed.report().str().find("1 on the blocked depthwise kernel"), std::string::npos) << fixed.report().str();
  for (size_t i = 0; i < inputs.size(); ++i) expect_close(outputs[i], program({inputs[i]})[0]);
  EXPECT_EQ(dynamic.compiles(), 1) << dynamic.report().str();
}

// MobileNet blocks: each 1x1 expansion that only its depthwise layer reads
// is made inside that layer (a 3x3 at stride 1 with ReLU6, a 5x5 at
// stride 2 with hard-swish), and so is a projection (with its residual) that
// alone reads the depthwise output; one also read by another layer stays a
// layer of its own, and so does each where KILN_CONV_ALGORITHM pins oneDNN's
// kernel. With the patch GEMM pinned every join is made, untimed; unpinned,
// where it pays on this CPU. Eager mode's answers either way.
TEST(BlockedLayout, OneByOneLayersNextToADepthwiseLayerAreMadeInsideIt) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(49);
  const Tensor w1 = randn({64, 16, 1, 1}) * 0.2, b1 = randn({64}) * 0.1, wd = randn({64, 1, 3, 3}) * 0.3,
               bd = randn({64}) * 0.1, w2 = randn({16, 64, 1, 1}) * 0.1, w3 = randn({32, 16, 1, 1}) * 0.2,
               wd5 = randn({32, 1, 5, 5}) * 0.2, w4 = randn({32, 16, 1, 1}) * 0.2, wd4 = randn({32, 1, 3, 3}) * 0.3,
               w0 = randn({16, 16, 1, 1}) * 0.3;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions dw3, dw5, dw4;
    dw3.padding = {1, 1};
    dw3.groups = 64;
    dw5.padding = {2, 2};
    dw5.stride = {2, 2};
    dw5.groups = 32;
    dw4.padding = {1, 1};
    dw4.groups = 32;
    const Tensor x = relu(conv2d(in[0], w0, Tensor()));  // (blocked, so that the residual add folds)
    const Tensor e = clamp(conv2d(x, w1, b1), 0.0, 6.0);
    const Tensor d = clamp(conv2d(e, wd, bd, dw3), 0.0, 6.0);
    const Tensor y = conv2d(d, w2, Tensor()) + x;
    const Tensor strided = hardswish(conv2d(hardswish(conv2d(y, w3, Tensor())), wd5, Tensor(), dw5));
    const Tensor shared = relu(conv2d(y, w4, Tensor()));  // read twice: stays
    return std::vector<Tensor>{strided, relu(conv2d(shared, wd4, Tensor(), dw4)) + shared};
  };
  ::setenv("KILN_CONV_ALGORITHM", "patch_gemm", 1);
  jit::CompileOptions o;
  o.inference = true;
  const Tensor x = randn({2, 16, 20, 40});
  auto fn = jit::compile(program, {x}, o);
  const std::vector<Tensor> got = fn({x});
  ::unsetenv("KILN_CONV_ALGORITHM");
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({x});
  for (size_t i = 0; i < want.size(); ++i) expect_close(got[i], want[i]);
  const std::string graph = fn.graph_text();
  EXPECT_EQ(count(graph, "(patch gemm) + conv2d["), 2u) << graph;
  EXPECT_EQ(count(graph, "+ relu6 (patch gemm) + conv2d[nChw16c -> nChw16c] + relu6 (depthwise)"), 1u) << graph;
  EXPECT_EQ(count(graph, "+ relu6 (depthwise) + conv2d[nChw16c -> nChw16c] + residual (patch gemm)"), 1u) << graph;
  EXPECT_EQ(count(graph, "+ hardswish (patch gemm) + conv2d[nChw16c -> nChw16c] + hardswish (depthwise)"), 1u) << graph;
  EXPECT_NE(fn.report().str().find("3 1x1 layers made inside the depthwise layer next to them"), std::string::npos)
      << fn.report().str();
  // Unpinned, each join is made where it runs faster on this CPU than the
  // two layers apart (depthwise_join_pays): eager's answers either way.
  auto timed = jit::compile(program, {x}, o);
  const std::vector<Tensor> timed_got = timed({x});
  for (size_t i = 0; i < want.size(); ++i) expect_close(timed_got[i], want[i]);
}

// A ResNeXt block (1x1, a 3x3 in groups of 4 channels, 1x1 with the
// residual) stays on blocked activations: the grouped layer runs on Kiln's
// kernel (oneDNN's blocked kernels lack such groups, and the plain one
// took 475 us against 145 on ResNeXt-50's 128-channel layer), with no
// reorders between the layers; eager mode's answer, at a fixed batch and a
// dynamic one.
TEST(BlockedLayout, AGroupedConvolutionOfFewChannelsStaysBlocked) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(50);
  const Tensor w1 = randn({32, 16, 1, 1}) * 0.3, wg = randn({32, 4, 3, 3}) * 0.3, bg = randn({32}) * 0.1,
               w2 = randn({16, 32, 1, 1}) * 0.2, w0 = randn({16, 16, 1, 1}) * 0.3;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions grouped;
    grouped.padding = {1, 1};
    grouped.groups = 8;
    const Tensor x = relu(conv2d(in[0], w0, Tensor()));
    const Tensor g = relu(conv2d(relu(conv2d(x, w1, Tensor())), wg, bg, grouped));
    return std::vector<Tensor>{relu(conv2d(g, w2, Tensor()) + x)};
  };
  jit::CompileOptions o;
  o.inference = true;
  const Tensor x = randn({2, 16, 20, 24});
  auto fixed = jit::compile(program, {x}, o);
  const Tensor got = fixed({x})[0];
  o.dynamic = {{0, 0}};
  auto dynamic = jit::compile(program, {}, o);
  std::vector<Tensor> inputs, outputs;
  for (int64_t n : {1, 3}) inputs.push_back(randn({n, 16, 20, 24}));
  for (const Tensor& input : inputs) outputs.push_back(dynamic({input})[0]);
  NoGradGuard no_grad;
  expect_close(got, program({x})[0]);
  for (size_t i = 0; i < inputs.size(); ++i) expect_close(outputs[i], program({inputs[i]})[0]);
  const std::string graph = fixed.graph_text();
  EXPECT_EQ(count(graph, "+ relu (grouped)"), 1u) << graph;
  EXPECT_EQ(count(graph, "reorder["), 2u) << "in and out only:\n" << graph;
}

// EfficientNet-V2's 3x3 convolutions with a SiLU run by Winograd (pinned;
// 48 -> 192 at 56x56 took 1.6 ms on oneDNN's kernel and 0.8 by F(4x4)),
// the SiLU in its output transform; a 2x2 max pool after one stays a pool
// of its own (the SiLU does not commute with the maximum). Eager mode's answers.
TEST(BlockedLayout, ASiluConvolutionRunsByWinograd) {
  if (cpu::onednn::preferred_block() != 16 || !cpu::gemm::swish_in_epilogue)
    GTEST_SKIP() << "the SiLU epilogue is AVX-512's";
  manual_seed(51);
  const Tensor w1 = randn({32, 16, 3, 3}) * 0.1, b1 = randn({32}) * 0.1, w2 = randn({32, 32, 3, 3}) * 0.1;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    const Tensor y = silu(conv2d(in[0], w1, b1, pad1));
    return std::vector<Tensor>{max_pool2d(silu(conv2d(y, w2, Tensor(), pad1)), {2, 2}, {2, 2})};
  };
  ::setenv("KILN_CONV_ALGORITHM", "winograd4x4", 1);
  jit::CompileOptions o;
  o.inference = true;
  const Tensor x = randn({2, 16, 20, 18});
  auto fn = jit::compile(program, {x}, o);
  const Tensor got = fn({x})[0];
  ::unsetenv("KILN_CONV_ALGORITHM");
  NoGradGuard no_grad;
  expect_close(got, program({x})[0]);
  const std::string graph = fn.graph_text();
  EXPECT_EQ(count(graph, "+ silu (winograd 4x4)"), 2u) << graph;
  EXPECT_EQ(count(graph, "max_pool2d[nChw16c]"), 1u) << graph;
}

// RegNetY's downsampling into 104 channels (8-channel blocks after
// 16-channel ones): its 1x1 shortcut and 3x3 at stride 2, whose 14-pixel
// rows are narrow for the implicit GEMM, run on it anyway, as oneDNN has no
// fast kernel between block sizes; they ran plain, after a reorder, and the
// stage after them too. Eager mode's answer, no reorder inside.
TEST(BlockedLayout, AStridedShortcutIntoSmallerBlocksStaysBlocked) {
  if (cpu::onednn::preferred_block() != 16) GTEST_SKIP() << "8- and 16-channel blocks side by side are AVX-512's";
  manual_seed(52);
  const Tensor w0 = randn({48, 16, 1, 1}) * 0.3, ws = randn({104, 48, 1, 1}) * 0.2, wm = randn({104, 48, 3, 3}) * 0.1,
               bm = randn({104}) * 0.1;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions down, down3;
    down.stride = {2, 2};
    down3.stride = {2, 2};
    down3.padding = {1, 1};
    const Tensor x = relu(conv2d(in[0], w0, Tensor()));
    return std::vector<Tensor>{relu(relu(conv2d(x, wm, bm, down3)) + conv2d(x, ws, Tensor(), down))};
  };
  jit::CompileOptions o;
  o.inference = true;
  const Tensor x = randn({1, 16, 28, 28});
  auto fn = jit::compile(program, {x}, o);
  const Tensor got = fn({x})[0];
  NoGradGuard no_grad;
  expect_close(got, program({x})[0]);
  const std::string graph = fn.graph_text();
  EXPECT_EQ(count(graph, "conv2d[nChw16c -> nChw8c]"), 2u) << graph;
  EXPECT_EQ(count(graph, "reorder["), 2u) << "in and out only:\n" << graph;
}

// A dynamic image height: the convolutions' geometry is fixed in their
// plans, so each height compiles a graph of its own, with the right answer.
TEST(BlockedLayout, ADynamicImageSizeCompilesPerSize) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(24);
  const Tensor w1 = randn({16, 3, 3, 3}) * 0.3, w2 = randn({16, 16, 3, 3}) * 0.1;
  auto program = [=](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    return std::vector<Tensor>{relu(conv2d(relu(conv2d(in[0], w1, Tensor(), pad1)), w2, Tensor(), pad1))};
  };
  std::vector<Tensor> inputs;
  for (int64_t h : {12, 9, 15}) inputs.push_back(randn({2, 3, h, 10}));
  const auto fn = run_like_eager(program, {{0, 2}}, inputs);
  EXPECT_EQ(fn.compiles(), 3) << fn.report().str();
}

}  // namespace

namespace {

// EfficientNet's squeeze-and-excitation before a 1x1 projection with a
// residual (24 channels: 8-channel blocks, Kiln's own 1x1 GEMM): the
// projection reads the activations unscaled and scales its weights per
// image. A constant per-channel factor goes in alike (one for every
// image); a product that is also read elsewhere stays.
TEST(BlockedLayout, SqueezeAndExcitationScalesGoIntoTheProjection) {
  if (cpu::onednn::preferred_block() != 16) GTEST_SKIP() << "the 1x1 GEMM between block sizes is AVX-512's";
  manual_seed(44);
  Tensor expand = randn({48, 24, 1, 1}) * 0.3, depthwise = randn({48, 1, 3, 3}) * 0.3;
  Tensor squeeze = randn({8, 48, 1, 1}) * 0.3, excite = randn({48, 8, 1, 1}) * 0.3;
  Tensor project = randn({24, 48, 1, 1}) * 0.3, other = randn({24, 48, 1, 1}) * 0.3, factor = randn({1, 48, 1, 1});
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions dw;
    dw.padding = {1, 1};
    dw.groups = 48;
    const Tensor y = silu(conv2d(silu(conv2d(in[0], expand, Tensor())), depthwise, Tensor(), dw));
    const Tensor s = sigmoid(conv2d(silu(conv2d(adaptive_avg_pool2d(y, {1, 1}), squeeze, Tensor())), excite, Tensor()));
    const Tensor excited = conv2d(y * s, project, Tensor()) + in[0];
    const Tensor constant = conv2d(y * factor, other, Tensor());
    const Tensor shared = y * (s + 1.0);
    return std::vector<Tensor>{excited, constant, conv2d(shared, project, Tensor()), shared};
  };
  for (int64_t batch : {1, 3}) {
    Tensor x = randn({batch, 24, 10, 9});
    jit::CompileOptions o;
    o.inference = true;  // (timed choices on: Kiln's own kernels are chosen by timing; 48 -> 24 has no other)
    auto fn = jit::compile(program, {x}, o);
    const std::string graph = fn.graph_text();
    EXPECT_EQ(count(graph, "(patch gemm, input scaled)"), 2u) << graph;
    EXPECT_EQ(count(graph, "per channel]"), 1u) << graph;
    const std::vector<Tensor> got = fn({x});
    NoGradGuard no_grad;
    const std::vector<Tensor> want = program({x});
    for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], want[i]);
  }
}

}  // namespace

namespace {

// A convolution's ReLU before a max pool runs on the pooled output (max and
// ReLU commute, NaN passing alike): the convolution writes its raw result,
// the pool applies the ReLU to the quarter it keeps. With a cap (ReLU6), or
// when the convolution's output is read elsewhere too, the ReLU stays.
TEST(BlockedLayout, AReluBeforeAMaxPoolRunsOnWhatThePoolKeeps) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(45);
  Tensor w1 = randn({32, 16, 3, 3}) * 0.2 - 0.05, w2 = randn({32, 16, 3, 3}) * 0.2, w3 = randn({16, 32, 1, 1}) * 0.3;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    const Tensor pooled = max_pool2d(relu(conv2d(in[0], w1, Tensor(), pad1)), {2, 2}, {2, 2});
    const Tensor shared = relu(conv2d(in[0], w2, Tensor(), pad1));
    return std::vector<Tensor>{conv2d(pooled, w3, Tensor()), max_pool2d(shared, {2, 2}, {2, 2}), shared};
  };
  Tensor x = randn({2, 16, 10, 9});
  x.data<float>()[77] = std::numeric_limits<float>::quiet_NaN();
  jit::CompileOptions o;
  o.inference = true;
  o.timed_choices = false;
  auto fn = jit::compile(program, {x}, o);
  const std::vector<Tensor> got = fn({x});
  const std::string graph = fn.graph_text();
  // The first pool's ReLU, and the second convolution's (its output read twice).
  EXPECT_EQ(count(graph, "+ relu("), 2u) << graph;
  const std::string pool = "max_pool2d[nChw" + std::to_string(cpu::onednn::preferred_block()) + "c] + relu(";
  EXPECT_EQ(count(graph, pool), 1u) << graph;
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({x});
  for (size_t i = 0; i < got.size(); ++i) {
    const auto a = got[i].to_vector<float>(), b = want[i].contiguous().to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    size_t nans = 0;
    for (size_t k = 0; k < a.size(); ++k) {
      nans += std::isnan(b[k]);
      if (std::isnan(b[k])) ASSERT_TRUE(std::isnan(a[k])) << "output " << i << " at " << k;
      else ASSERT_NEAR(a[k], b[k], 1e-4 + 1e-4 * std::abs(b[k])) << "output " << i << " at " << k;
    }
    EXPECT_GT(nans, 0u) << "output " << i << ": the NaN reaches it";
  }
}

// A 2x2, stride-2 max pool that alone reads a Winograd convolution's output
// runs inside it, with the convolution's ReLU (moved onto the pool) or none;
// a pool of another window, and a convolution read twice, keep their own
// pool. KILN_CONV_ALGORITHM pins both tile sizes, so the test does not
// depend on what timing chooses; a value it does not know is an error.
TEST(BlockedLayout, AMaxPoolAfterAWinogradConvolutionRunsInsideIt) {
  if (cpu::onednn::preferred_block() == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  manual_seed(46);
  Tensor w1 = randn({32, 16, 3, 3}) * 0.2, b1 = randn({32}), w2 = randn({16, 32, 3, 3}) * 0.2,
         w3 = randn({16, 16, 3, 3}) * 0.2, w4 = randn({16, 16, 3, 3}) * 0.2;
  auto program = [&](const std::vector<Tensor>& in) {
    ConvOptions pad1;
    pad1.padding = {1, 1};
    Tensor y = max_pool2d(relu(conv2d(in[0], w1, b1, pad1)), {2, 2}, {2, 2});  // 11x9 -> 5x4
    y = max_pool2d(conv2d(y, w2, Tensor(), pad1), {2, 2}, {2, 2});            // no ReLU: 5x4 -> 2x2
    const Tensor other = max_pool2d(conv2d(in[0], w3, Tensor(), pad1), {3, 3}, {2, 2});
    const Tensor shared = relu(conv2d(in[0], w4, Tensor(), pad1));
    return std::vector<Tensor>{y, other, max_pool2d(shared, {2, 2}, {2, 2}), shared};
  };
  Tensor x = randn({3, 16, 11, 9});
  x.data<float>()[2 * 16 * 99 + 40] = std::numeric_limits<float>::quiet_NaN();  // image 2
  NoGradGuard no_grad;
  const std::vector<Tensor> want = program({x});
  for (const char* algorithm : {"winograd2x2", "winograd4x4"}) {
    SCOPED_TRACE(algorithm);
    ::setenv("KILN_CONV_ALGORITHM", algorithm, 1);
    jit::CompileOptions o;
    o.inference = true;
    auto fn = jit::compile(program, {x}, o);
    const std::vector<Tensor> got = fn({x});
    ::unsetenv("KILN_CONV_ALGORITHM");
    const std::string graph = fn.graph_text();
    EXPECT_EQ(count(graph, "] + relu + max_pool2d (winograd"), 1u) << graph;
    EXPECT_EQ(count(graph, "] + max_pool2d (winograd"), 1u) << graph;
    EXPECT_EQ(count(graph, "max_pool2d[nChw"), 2u) << "the 3x3 pool and the shared one stay:\n" << graph;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
      const auto a = got[i].to_vector<float>(), b = want[i].contiguous().to_vector<float>();
      const size_t per_image = a.size() / 3;
      for (size_t k = 0; k < a.size(); ++k) {
        if (k / per_image == 2) continue;  // (Winograd spreads a NaN over whole tiles)
        ASSERT_FALSE(std::isnan(a[k])) << "output " << i << " at " << k;
        ASSERT_NEAR(a[k], b[k], 1e-4 + 1e-4 * std::abs(b[k])) << "output " << i << " at " << k;
      }
      size_t nans = 0;
      for (size_t k = 2 * per_image; k < a.size(); ++k) nans += std::isnan(a[k]);
      EXPECT_GT(nans, 0u) << "output " << i << ": the NaN reaches it through ReLU and pool";
    }
  }
  ::setenv("KILN_CONV_ALGORITHM", "fastest", 1);
  jit::CompileOptions o;
  o.inference = true;
  try {
    jit::compile(program, {x}, o);
    ADD_FAILURE() << "an unknown KILN_CONV_ALGORITHM compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KILN_CONV_ALGORITHM=fastest is not an algorithm"), std::string::npos)
        << e.what();
  }
  ::unsetenv("KILN_CONV_ALGORITHM");
}

}  // namespace

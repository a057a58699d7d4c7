// The kernels behind graph mode's blocked layouts, against Kiln's plain
// convolution and its gradients.
#include "backends/cpu/passes/layout_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/conv_algorithm.h"
#include "backends/cpu/cpu_caches.h"
#include "backends/cpu/few_channel_conv.h"
#include "backends/cpu/gemm_tile.h"
#include "backends/cpu/lanes.h"
#include "backends/cpu/packed_linear.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "kiln/kiln.h"

namespace {
using namespace kiln;
namespace onednn = cpu::onednn;

Tensor to_blocked(const Tensor& plain, int block) {
  const Shape& s = plain.shape();
  Tensor out = Tensor::empty(s);
  onednn::reorder_layout(s[0], s[1], s[2], s[3], 0, block, plain.contiguous().data<float>(), out.data<float>());
  return out;
}

void expect_near_all(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  auto a = got.to_vector<float>(), b = want.to_vector<float>();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << ", element " << i;
}

// "names: v1 v2 ...", a case's description in a failure message.
std::string describe(const std::string& names, std::initializer_list<int64_t> values) {
  std::string what = names + ":";
  for (int64_t v : values) what.append(" ").append(std::to_string(v));
  return what;
}

ConvOptions conv_options(int64_t stride, int64_t pad, int64_t dilation, int64_t groups = 1) {
  ConvOptions opts;
  opts.stride = {stride, stride};
  opts.padding = {pad, pad};
  opts.dilation = {dilation, dilation};
  opts.groups = groups;
  return opts;
}

// Kiln's blocked depthwise (or few-channel grouped) kernel on plain x and
// w, its output blocked as the call's; bias undefined: none.
Tensor blocked_depthwise(const onednn::LayoutCall& call, const Tensor& x, const Tensor& w, const Tensor& bias,
                         const Shape& y_shape) {
  Tensor taps = Tensor::empty({cpu::blocked_depthwise_weights_size(call)});
  cpu::blocked_depthwise_weights(call, w.contiguous().data<float>(), taps.data<float>());
  Tensor input = to_blocked(x, call.src_block), y = Tensor::empty(y_shape);
  cpu::blocked_depthwise_conv(call, input.data<float>(), taps.data<float>(),
                              bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
  return y;
}

// What a fused convolution kernel must produce: conv2d, then for epilogue 1
// the bias and a ReLU, for epilogue 2 the bias, `residual` and a ReLU.
Tensor expected_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvOptions& opts, int epilogue,
                     const Tensor& residual) {
  Tensor want = conv2d(x, w, epilogue ? b : Tensor(), opts);
  if (epilogue == 2) want = want + residual;
  return epilogue ? relu(want) : want;
}

struct WinogradCase {
  int64_t n, c, o, h, w, pad;
};

// Both tile sizes; partial edge tiles (output sizes not a multiple of the
// tile), no padding, both block sizes, and every epilogue: bias, residual,
// ReLU, SiLU, a 2x2 max pool after the ReLU (odd output sizes: the last row or
// column is left out of it); few tiles (one chunk, the GEMMs spread over threads) and many (a
// chunk per thread at a time); products on Kiln's register tiles with an
// odd number of 16-channel panels and a last half panel (24 channels), and
// on oneDNN's sgemm (256 x 256 channels).
TEST(LayoutKernels, WinogradMatchesTheDirectConvolution) {
  manual_seed(2);
  for (const WinogradCase& k : {WinogradCase{2, 8, 16, 9, 9, 1}, WinogradCase{1, 16, 8, 6, 11, 0},
                                WinogradCase{3, 16, 16, 7, 7, 1}, WinogradCase{4, 8, 8, 31, 30, 1},
                                WinogradCase{2, 32, 16, 58, 57, 1}, WinogradCase{2, 8, 24, 20, 19, 1},
                                WinogradCase{1, 256, 256, 6, 5, 1}}) {
    for (int tile : {2, 4})
    for (int block : {8, 16}) {
      if (k.c % block || k.o % block) continue;
      // 0: none, 1: bias + relu, 2: bias + residual + relu, 3: bias + relu + 2x2 max pool, 4: bias + SiLU (with
      // AVX-512)
      for (int epilogue = 0; epilogue < 5; ++epilogue) {
        if (epilogue == 4 && !cpu::gemm::swish_in_epilogue) continue;
        const std::string what =
            describe("n c o h w pad tile block epilogue", {k.n, k.c, k.o, k.h, k.w, k.pad, tile, block, epilogue});
        Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.o, k.c, 3, 3}) * 0.2, b = randn({k.o});
        const ConvOptions opts = conv_options(1, k.pad, 1);
        Tensor residual = randn(conv2d(x, w, Tensor(), opts).shape());
        const bool pool = epilogue == 3, swish = epilogue == 4;
        const Tensor biased = conv2d(x, w, b, opts);
        Tensor full = swish ? biased * sigmoid(biased) : expected_conv(x, w, b, opts, pool ? 1 : epilogue, residual);
        Tensor want = pool ? max_pool2d(full, {2, 2}, {2, 2}) : full;
        const Shape& ys = full.shape();
        onednn::ConvShape s{k.n, k.c, k.h, k.w, k.o, 3, 3, ys[2], ys[3], 1, 1, k.pad, k.pad, 1, 1, 1};
        ASSERT_TRUE(cpu::winograd_applies(s, block)) << what;
        Tensor u = Tensor::empty({cpu::winograd_weights_size(s, tile)});
        cpu::winograd_weights(s, tile, w.contiguous().data<float>(), u.data<float>());
        Tensor y = epilogue == 2 ? to_blocked(residual, block) : Tensor::empty(want.shape());
        cpu::winograd_conv(s, tile, block, to_blocked(x, block).data<float>(), u.data<float>(), y.data<float>(),
                           {epilogue ? b.data<float>() : nullptr, epilogue > 0 && !swish, epilogue == 2, pool, swish});
        // Rounding grows with the channels summed (F(4x4)'s the most).
        expect_near_all(y, to_blocked(want, block), 1e-4 * std::max(1.0, std::sqrt(k.c / 32.0)), what);
      }
    }
  }
}

struct PatchCase {
  int64_t n, c, o, h, w, k, stride, pad, dilation;
  int src_block;  // 8 or 16: nChw8c or nChw16c input; 0: plain (a stem of a few channels)
};

// 3x3 and 1x1 kernels, strides, padding and dilation; pixel counts that are
// not whole tiles of 6; more than one pass over the patch (c * k * k > 256);
// a batch; and every epilogue. From plain input, into both block sizes:
// ResNet's 7x7 stride-2 stem and a 3x3 one, on images of more pixels than a
// gathered chunk, with padding cut at every edge, an odd number of panels
// (48 channels), a hard-swish as MobileNetV3's stem has, and channels that
// end in half a panel into nChw8c (MnasNet 1.3's 40, and 24). From blocked
// input on the implicit GEMM (into nChw16c, with a hard-swish, or beyond
// 256 pixels; rows of at least 22 pixels): SqueezeNet's 16 -> 64 at 55x55
// (rows of five 11-pixel tiles), stride 2 with three panels and a batch, a
// 5x5 kernel, no padding, dilation, and a last half panel (24 and 40
// channels into nChw8c); and narrow rows from nChw16c into nChw8c, for which
// oneDNN has no fast kernel (RegNetY's 1x1 at stride 2, a 3x3 at 9x9). On
// the gathered GEMM from either block size: ResNet-50's 512-channel 3x3 at
// stride 2 into 7x7 (two passes over the patch), and three panels (a pair
// and one alone) with a batch.
TEST(LayoutKernels, PatchGemmMatchesTheDirectConvolution) {
  manual_seed(4);
  for (const PatchCase& k :
       {PatchCase{1, 64, 32, 7, 7, 3, 1, 1, 1, 8},     PatchCase{2, 16, 16, 9, 8, 3, 2, 1, 1, 8},
        PatchCase{1, 24, 48, 14, 14, 1, 2, 0, 1, 8},   PatchCase{1, 8, 16, 10, 10, 3, 1, 2, 2, 8},
        PatchCase{1, 3, 64, 45, 39, 7, 2, 3, 1, 0},    PatchCase{2, 3, 32, 23, 29, 3, 2, 1, 1, 0},
        PatchCase{1, 1, 16, 17, 13, 3, 1, 1, 1, 0},    PatchCase{1, 3, 48, 20, 21, 3, 2, 1, 1, 0},
        PatchCase{1, 16, 64, 55, 55, 3, 1, 1, 1, 16},  PatchCase{2, 32, 48, 13, 47, 3, 2, 1, 1, 16},
        PatchCase{1, 16, 32, 12, 33, 5, 1, 2, 1, 16},  PatchCase{1, 16, 32, 10, 24, 3, 1, 0, 1, 16},
        PatchCase{1, 16, 40, 9, 35, 3, 1, 2, 2, 16},   PatchCase{1, 8, 24, 20, 23, 3, 1, 1, 1, 8},
        PatchCase{1, 48, 24, 14, 14, 1, 2, 0, 1, 16},  PatchCase{2, 16, 40, 9, 9, 3, 1, 1, 1, 16},
        PatchCase{1, 512, 64, 14, 14, 3, 2, 1, 1, 16}, PatchCase{2, 32, 48, 7, 7, 3, 1, 1, 1, 16},
        PatchCase{1, 3, 40, 23, 29, 3, 2, 1, 1, 0},    PatchCase{2, 1, 24, 17, 13, 3, 1, 1, 1, 0}}) {
    for (int cell = 0; cell < 12; ++cell) {
      // epilogue 0: none, 1: bias + relu, 2: bias + residual + relu, 3: bias + hard-swish, 4: bias + relu capped,
      // 5: bias + SiLU (with AVX-512)
      const int epilogue = cell % 6, dst_block = cell < 6 ? 8 : 16;
      if (k.o % dst_block || (epilogue == 5 && !cpu::gemm::swish_in_epilogue)) continue;
      const std::string what =
          describe("n c o h w k stride pad dilation src_block epilogue dst_block",
                   {k.n, k.c, k.o, k.h, k.w, k.k, k.stride, k.pad, k.dilation, k.src_block, epilogue, dst_block});
      Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.o, k.c, k.k, k.k}) * 0.2, b = randn({k.o});
      const ConvOptions opts = conv_options(k.stride, k.pad, k.dilation);
      Tensor residual = randn(conv2d(x, w, Tensor(), opts).shape());
      const Tensor biased = conv2d(x, w, b, opts);
      Tensor want = epilogue == 3   ? hardswish(biased)
                    : epilogue == 4 ? clamp(biased, 0.0, 1.5)
                    : epilogue == 5 ? biased * sigmoid(biased)
                                    : expected_conv(x, w, b, opts, epilogue, residual);
      const Shape& ys = want.shape();
      onednn::ConvShape s{k.n,      k.c,      k.h,   k.w,   k.o,        k.k,        k.k,        ys[2],
                          ys[3],    k.stride, k.stride, k.pad, k.pad, k.dilation, k.dilation, 1};
      onednn::LayoutCall call;
      call.shape = s;
      call.src_block = k.src_block;
      call.dst_block = dst_block;
      call.relu = epilogue == 1 || epilogue == 2 || epilogue == 4;
      call.cap = epilogue == 4 ? 1.5f : 0.0f;
      call.residual = epilogue == 2;
      call.hardswish = epilogue == 3;
      call.swish = epilogue == 5;
      if (!cpu::patch_gemm_applies(
              call)) {  // few pixels on narrow rows take the gathered GEMM, which has no hard-swish
        ASSERT_EQ(epilogue, 3) << what;
        continue;
      }
      Tensor packed = Tensor::empty({cpu::patch_gemm_weights_size(s)});
      cpu::patch_gemm_weights(s, k.src_block, w.contiguous().data<float>(), packed.data<float>());
      Tensor y = epilogue == 2 ? to_blocked(residual, dst_block) : Tensor::empty(ys);
      Tensor input = k.src_block ? to_blocked(x, k.src_block) : x.contiguous();
      cpu::patch_gemm_conv(call, input.data<float>(), packed.data<float>(), epilogue ? b.data<float>() : nullptr,
                           y.data<float>());
      expect_near_all(y, to_blocked(want, dst_block), 1e-4, what);
    }
  }
}

struct DepthwiseCase {
  int64_t n, c, h, w, k, stride, pad, dilation;
  int block;
};

// Kiln's blocked depthwise kernel against the plain grouped convolution:
// 3x3, 5x5 and 7x7 windows (its unrolled forms), dilated ones (its general
// form), strides 1 and 2, windows past every edge, wide images
// (split by rows: 32 columns and more with AVX-512) and narrow ones (whole
// channel blocks, padding copied in), several images, both block sizes and
// each epilogue: none, bias + ReLU, bias + ReLU capped (ReLU6), bias +
// hard-swish, bias + SiLU (16-channel blocks, with AVX-512). NaN passes the
// ReLU and the cap as in the eager ops.
TEST(LayoutKernels, BlockedDepthwiseMatchesTheGroupedConvolution) {
  manual_seed(11);
  for (const DepthwiseCase& k :
       {DepthwiseCase{1, 32, 40, 37, 3, 1, 1, 1, 16}, DepthwiseCase{2, 16, 34, 35, 3, 2, 1, 1, 16},
        DepthwiseCase{1, 24, 36, 33, 5, 1, 2, 1, 8}, DepthwiseCase{1, 48, 7, 7, 5, 1, 2, 1, 16},
        DepthwiseCase{1, 16, 14, 14, 3, 1, 1, 1, 16}, DepthwiseCase{2, 24, 13, 11, 5, 2, 2, 1, 8},
        DepthwiseCase{1, 16, 9, 40, 7, 1, 3, 1, 16}, DepthwiseCase{1, 8, 6, 5, 3, 1, 0, 1, 8},
        DepthwiseCase{1, 16, 12, 36, 3, 1, 2, 2, 16}, DepthwiseCase{1, 8, 3, 3, 5, 1, 2, 1, 8}}) {
    for (int epilogue = 0; epilogue < 5; ++epilogue) {
      if (epilogue == 4 && (k.block != 16 || !cpu::gemm::swish_in_epilogue)) continue;
      const std::string what = describe("n c h w k stride pad dilation block epilogue",
                                        {k.n, k.c, k.h, k.w, k.k, k.stride, k.pad, k.dilation, k.block, epilogue});
      Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.c, 1, k.k, k.k}) * 0.3, b = randn({k.c});
      if (epilogue == 1) x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
      const ConvOptions opts = conv_options(k.stride, k.pad, k.dilation, k.c);
      const Tensor biased = conv2d(x, w, epilogue ? b : Tensor(), opts);
      Tensor want = epilogue == 1   ? relu(biased)
                    : epilogue == 2 ? clamp(biased, 0.0, 1.5)
                    : epilogue == 3 ? hardswish(biased)
                    : epilogue == 4 ? biased * sigmoid(biased)
                                    : biased;
      const Shape& ys = want.shape();
      onednn::LayoutCall call;
      call.shape = {k.n,   k.c,      k.h,      k.w,   k.c,   k.k,        k.k,        ys[2],
                    ys[3], k.stride, k.stride, k.pad, k.pad, k.dilation, k.dilation, k.c};
      call.src_block = call.dst_block = k.block;
      call.bias = epilogue > 0;
      call.relu = epilogue == 1 || epilogue == 2;
      call.cap = epilogue == 2 ? 1.5f : 0.0f;
      call.hardswish = epilogue == 3;
      call.swish = epilogue == 4;
      ASSERT_TRUE(cpu::blocked_depthwise_applies(call)) << what;
      const Tensor y = blocked_depthwise(call, x, w, epilogue ? b : Tensor(), ys);
      auto got = y.to_vector<float>(), expected = to_blocked(want, k.block).to_vector<float>();
      ASSERT_EQ(got.size(), expected.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(expected[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << what << ", element " << i;
          continue;
        }
        ASSERT_NEAR(got[i], expected[i], 1e-4 * (1 + std::abs(expected[i]))) << what << ", element " << i;
      }
    }
  }
  // Not for it: a channel multiplier, a residual, another block out, a SiLU on 8-channel blocks.
  onednn::LayoutCall call;
  call.shape = {1, 16, 8, 8, 32, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 16};
  call.src_block = call.dst_block = 16;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call));
  call.shape.o = 16;
  EXPECT_TRUE(cpu::blocked_depthwise_applies(call));
  call.residual = true;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call));
  call.residual = false;
  call.dst_block = 8;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call));
  call.src_block = 8;
  call.swish = true;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call)) << "a SiLU on 8-channel blocks";
}

struct GroupedCase {
  int64_t n, c, h, w, gw, k, stride, pad, dilation;
  int block;
};

// Grouped convolutions of 2, 4, 8 and 16 channels a group (ResNeXt's 4 and
// 8, RegNetY's 8, RegNetX's 16) on the same kernel, each input channel of a
// group taken in turn through a permutation of the block's lanes (a
// broadcast where a block is one group): 3x3 at strides 1 and 2
// (the unrolled forms), a dilated and a 5x5 window (the general form), wide
// and narrow images, both block sizes, with and without bias and ReLU.
TEST(LayoutKernels, BlockedGroupedConvolutionsOfABlockOrLessMatchConv2d) {
  manual_seed(13);
  for (const GroupedCase& k :
       {GroupedCase{1, 32, 40, 37, 4, 3, 1, 1, 1, 16}, GroupedCase{2, 32, 34, 35, 8, 3, 2, 1, 1, 16},
        GroupedCase{1, 16, 14, 14, 2, 3, 1, 1, 1, 8}, GroupedCase{1, 32, 12, 36, 4, 3, 1, 2, 2, 16},
        GroupedCase{1, 16, 9, 40, 8, 3, 1, 1, 1, 8}, GroupedCase{1, 32, 11, 13, 4, 5, 2, 2, 1, 16},
        GroupedCase{1, 64, 7, 7, 8, 3, 1, 1, 1, 16}, GroupedCase{1, 32, 14, 36, 16, 3, 1, 1, 1, 16},
        GroupedCase{2, 48, 15, 15, 16, 3, 2, 1, 1, 16}}) {
    if (k.block == 16 && !cpu::kSixteenLanes) continue;
    for (int epilogue = 0; epilogue < 2; ++epilogue) {
      const std::string what =
          describe("n c h w gw k stride pad dilation block epilogue",
                   {k.n, k.c, k.h, k.w, k.gw, k.k, k.stride, k.pad, k.dilation, k.block, epilogue});
      Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.c, k.gw, k.k, k.k}) * 0.3, b = randn({k.c});
      const ConvOptions opts = conv_options(k.stride, k.pad, k.dilation, k.c / k.gw);
      const Tensor want = epilogue ? relu(conv2d(x, w, b, opts)) : conv2d(x, w, Tensor(), opts);
      const Shape& ys = want.shape();
      onednn::LayoutCall call;
      call.shape = {k.n,   k.c,      k.h,      k.w,   k.c,   k.k,        k.k,        ys[2],
                    ys[3], k.stride, k.stride, k.pad, k.pad, k.dilation, k.dilation, k.c / k.gw};
      call.src_block = call.dst_block = k.block;
      call.bias = call.relu = epilogue == 1;
      ASSERT_TRUE(cpu::blocked_depthwise_applies(call)) << what;
      expect_near_all(blocked_depthwise(call, x, w, epilogue ? b : Tensor(), ys), to_blocked(want, k.block), 1e-4,
                      what);
    }
  }
  // Not for it: groups wider than a block (16 channels in 8-channel
  // blocks), groups that straddle a block (12 channels), more output
  // channels than input.
  onednn::LayoutCall call;
  call.shape = {1, 64, 8, 8, 64, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1, 4};
  call.src_block = call.dst_block = 8;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call)) << "16 channels a group in 8-channel blocks";
  call.shape.c = call.shape.o = 48;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call)) << "12 channels a group";
  call.shape.groups = 12;
  EXPECT_TRUE(cpu::blocked_depthwise_applies(call));
  call.shape.o = 96;
  EXPECT_FALSE(cpu::blocked_depthwise_applies(call)) << "two outputs a channel";
}

struct ExpansionCase {
  int64_t n, c_in, c, h, w, k, stride, pad, dilation;
  int src_block, block;
};

// A 1x1 expansion made inside the depthwise layer that reads it, a few rows
// at a time, and a 1x1 projection of each output row, against the kernels
// one after the other: windows past the top and bottom, strides 1 and 2, a
// dilated window (a ring of 5 rows), 3x3 and 5x5, several images, both
// block sizes in and out, with and without biases, the epilogues (ReLU6,
// hard-swish with a residual on the projection, SiLU where the CPU has it).
TEST(LayoutKernels, OneByOneLayersMadeInsideTheirDepthwiseLayerMatchTheLayers) {
  manual_seed(12);
  for (const ExpansionCase& k :
       {ExpansionCase{2, 16, 32, 9, 36, 3, 1, 1, 1, 16, 16}, ExpansionCase{1, 24, 48, 11, 40, 5, 2, 2, 1, 8, 16},
        ExpansionCase{1, 16, 24, 8, 33, 3, 2, 1, 1, 16, 8}, ExpansionCase{1, 8, 16, 7, 34, 3, 1, 2, 2, 8, 8}}) {
    for (int epilogue = 0; epilogue < 4; ++epilogue) {
      if (epilogue == 3 && (k.block != 16 || !cpu::gemm::swish_in_epilogue)) continue;
      if (k.block == 16 && !cpu::kSixteenLanes) continue;
      const std::string what =
          describe("n c_in c h w k stride pad dilation src_block block epilogue",
                   {k.n, k.c_in, k.c, k.h, k.w, k.k, k.stride, k.pad, k.dilation, k.src_block, k.block, epilogue});
      const int64_t oh = (k.h + 2 * k.pad - k.dilation * (k.k - 1) - 1) / k.stride + 1;
      const int64_t ow = (k.w + 2 * k.pad - k.dilation * (k.k - 1) - 1) / k.stride + 1;
      onednn::LayoutCall expand, depthwise;
      expand.shape = {k.n, k.c_in, k.h, k.w, k.c, 1, 1, k.h, k.w, 1, 1, 0, 0, 1, 1, 1};
      expand.src_block = k.src_block;
      depthwise.shape = {k.n, k.c,      k.h,      k.w,   k.c,   k.k,        k.k,        oh,
                         ow,  k.stride, k.stride, k.pad, k.pad, k.dilation, k.dilation, k.c};
      expand.dst_block = depthwise.src_block = depthwise.dst_block = k.block;
      for (onednn::LayoutCall* call : {&expand, &depthwise}) {
        call->bias = epilogue > 0;
        call->relu = epilogue == 1;
        call->cap = epilogue == 1 ? 6.0f : 0.0f;
        call->hardswish = epilogue == 2;
        call->swish = epilogue == 3;
      }
      ASSERT_TRUE(cpu::pointwise_depthwise_applies(expand, depthwise)) << what;
      Tensor x = to_blocked(randn({k.n, k.c_in, k.h, k.w}), k.src_block);
      Tensor we = randn({k.c, k.c_in, 1, 1}) * 0.3, be = randn({k.c}), wd = randn({k.c, 1, k.k, k.k}) * 0.3,
             bd = randn({k.c});
      Tensor panels = Tensor::empty({cpu::patch_gemm_weights_size(expand.shape)});
      cpu::patch_gemm_weights(expand.shape, k.src_block, we.data<float>(), panels.data<float>());
      Tensor taps = Tensor::empty({cpu::blocked_depthwise_weights_size(depthwise)});
      cpu::blocked_depthwise_weights(depthwise, wd.data<float>(), taps.data<float>());
      const float* eb = epilogue ? be.data<float>() : nullptr;
      const float* db = epilogue ? bd.data<float>() : nullptr;
      Tensor middle = Tensor::empty({k.n, k.c, k.h, k.w}), want = Tensor::empty({k.n, k.c, oh, ow});
      cpu::patch_gemm_conv(expand, x.data<float>(), panels.data<float>(), eb, middle.data<float>());
      cpu::blocked_depthwise_conv(depthwise, middle.data<float>(), taps.data<float>(), db, want.data<float>());
      Tensor got = Tensor::empty({k.n, k.c, oh, ow});
      cpu::depthwise_chain_conv({depthwise, taps.data<float>(), db, &expand, panels.data<float>(), eb}, x.data<float>(),
                                got.data<float>());
      expect_near_all(got, want, 1e-5, what);
      // The projection (into 8-channel blocks, a residual on the second
      // epilogue) made inside too, after the expansion and without it.
      onednn::LayoutCall project;
      project.shape = {k.n, k.c, oh, ow, 24, 1, 1, oh, ow, 1, 1, 0, 0, 1, 1, 1};
      project.src_block = k.block;
      project.dst_block = 8;
      project.bias = epilogue > 0;
      project.residual = epilogue == 2;
      ASSERT_TRUE(cpu::depthwise_pointwise_applies(depthwise, project)) << what;
      Tensor wp = randn({24, k.c, 1, 1}) * 0.3, bp = randn({24}), residual = randn({k.n, 24, oh, ow});
      Tensor projected = Tensor::empty({cpu::patch_gemm_weights_size(project.shape)});
      cpu::patch_gemm_weights(project.shape, k.block, wp.data<float>(), projected.data<float>());
      const float* pb = epilogue ? bp.data<float>() : nullptr;
      Tensor want_projected = epilogue == 2 ? residual.clone() : Tensor::empty({k.n, 24, oh, ow});
      cpu::patch_gemm_conv(project, want.data<float>(), projected.data<float>(), pb, want_projected.data<float>());
      Tensor whole = epilogue == 2 ? residual.clone() : Tensor::empty({k.n, 24, oh, ow});
      cpu::depthwise_chain_conv(
          {depthwise, taps.data<float>(), db, &expand, panels.data<float>(), eb, &project, projected.data<float>(), pb},
          x.data<float>(), whole.data<float>());
      expect_near_all(whole, want_projected, 1e-5, what + ", projected");
      Tensor alone = epilogue == 2 ? residual.clone() : Tensor::empty({k.n, 24, oh, ow});
      cpu::depthwise_chain_conv(
          {depthwise, taps.data<float>(), db, nullptr, nullptr, nullptr, &project, projected.data<float>(), pb},
          middle.data<float>(), alone.data<float>());
      expect_near_all(alone, want_projected, 1e-5, what + ", projected without the expansion");
    }
  }
  // Not for it: narrow rows (the depthwise kernel takes whole channel
  // blocks there), a 1x1 layer with a residual, or into another block, or a 3x3.
  onednn::LayoutCall expand, depthwise;
  expand.shape = {1, 16, 8, 40, 32, 1, 1, 8, 40, 1, 1, 0, 0, 1, 1, 1};
  depthwise.shape = {1, 32, 8, 40, 32, 3, 3, 8, 40, 1, 1, 1, 1, 1, 1, 32};
  expand.src_block = expand.dst_block = depthwise.src_block = depthwise.dst_block = 8;
  EXPECT_TRUE(cpu::pointwise_depthwise_applies(expand, depthwise));
  expand.shape.w = expand.shape.ow = depthwise.shape.w = depthwise.shape.ow = 14;
  EXPECT_FALSE(cpu::pointwise_depthwise_applies(expand, depthwise)) << "14 columns";
  expand.shape.w = expand.shape.ow = depthwise.shape.w = depthwise.shape.ow = 40;
  expand.residual = true;
  EXPECT_FALSE(cpu::pointwise_depthwise_applies(expand, depthwise)) << "a residual";
  expand.residual = false;
  expand.dst_block = 16;
  EXPECT_FALSE(cpu::pointwise_depthwise_applies(expand, depthwise)) << "another block";
  expand.dst_block = 8;
  expand.shape.kh = expand.shape.kw = 3;
  expand.shape.ph = expand.shape.pw = 1;
  EXPECT_FALSE(cpu::pointwise_depthwise_applies(expand, depthwise)) << "a 3x3";
  onednn::LayoutCall project;
  project.shape = {1, 32, 8, 40, 16, 1, 1, 8, 40, 1, 1, 0, 0, 1, 1, 1};
  project.src_block = project.dst_block = 8;
  EXPECT_TRUE(cpu::depthwise_pointwise_applies(depthwise, project));
  project.src_block = 16;
  EXPECT_FALSE(cpu::depthwise_pointwise_applies(depthwise, project)) << "another block";
  EXPECT_THROW(cpu::depthwise_chain_conv({depthwise, nullptr, nullptr}, nullptr, nullptr), Error)
      << "a chain of one layer";
}

// Rows that are not whole register tiles, more than one pass over k (in >
// 256), a last panel of fewer than 16 columns, pairs of panels (and a group
// of panels that ends in an odd one), several row blocks (whose threads
// prefetch the next slice of weights), and every epilogue.
TEST(LayoutKernels, PackedLinearMatchesLinear) {
  manual_seed(5);
  for (const Shape& dims :
       {Shape{7, 300, 20}, Shape{1, 64, 16}, Shape{150, 40, 33}, Shape{13, 520, 100}, Shape{300, 600, 200}}) {
    const int64_t rows = dims[0], in = dims[1], out = dims[2];
    for (int epilogue = 0; epilogue < 3; ++epilogue) {  // 0: none, 1: bias + relu, 2: bias + residual + relu
      const std::string what = "rows " + std::to_string(rows) + " in " + std::to_string(in) + " out " +
                               std::to_string(out) + " epilogue " + std::to_string(epilogue);
      Tensor x = randn({rows, in}), w = randn({out, in}) * 0.1, b = randn({out}), residual = randn({rows, out});
      Tensor want = linear(x, w, epilogue ? b : Tensor());
      if (epilogue == 2) want = want + residual;
      if (epilogue) want = relu(want);
      Tensor packed = Tensor::empty({cpu::packed_linear_weights_size(out, in)});
      cpu::pack_linear_weights(w.data<float>(), out, in, packed.data<float>());
      Tensor y = epilogue == 2 ? residual.clone() : Tensor::empty({rows, out});
      cpu::packed_linear(x.data<float>(), rows, in, out, packed.data<float>(), epilogue ? b.data<float>() : nullptr,
                         y.data<float>(), epilogue == 2, epilogue > 0);
      expect_near_all(y, want, 1e-4, what);
    }
  }
}

// The register tile's epilogue against a scalar reference, for one panel
// and a pair, through both A readers (a function of (row, k) and a
// channel-blocked image), in every combination: accumulate (a residual or
// an earlier pass), last or not, bias or none, ReLU with and without a cap,
// hard-swish, SiLU and GELU (where the epilogue has them), and outputs
// whose second 8 columns follow, sit elsewhere, or do not exist.
TEST(LayoutKernels, GemmTileEpiloguesMatchAScalarReference) {
  namespace gemm = cpu::gemm;
  constexpr int R = gemm::kRows, S = 8;
  constexpr int64_t kStride = 40, kSecond = 4096;  // output row stride; the second panel's output
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = 3 * normal(rng);
  };
  enum Activation { kNone, kRelu, kRelu6, kHardswish, kSwish, kGelu, kGeluTanh };
  const auto activate = [](float v, Activation a) {
    switch (a) {
      case kNone:
        return v;
      case kRelu:
        return v < 0 ? 0.0f : v;
      case kRelu6:
        return std::min(v < 0 ? 0.0f : v, 6.0f);
      case kHardswish:
        return v * (std::min(std::max(v + 3, 0.0f), 6.0f) / 6);
      case kSwish:
        return v / (1 + std::exp(-v));
      case kGelu:
        return 0.5f * v * std::erfc(-v / std::sqrt(2.0f));
      case kGeluTanh:
        return 0.5f * v * (1 + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
    return v;
  };
  int checked = 0;
  for (int64_t depth : {8, 24})
    for (int half : {8, 0, 24})
      for (int flags = 0; flags < 8; ++flags)
        for (Activation act : {kNone, kRelu, kRelu6, kHardswish, kSwish, kGelu, kGeluTanh})
          for (int pair = 0; pair < 2; ++pair)
            for (int blocked = 0; blocked < 2; ++blocked) {
              if ((act == kSwish || act == kGelu || act == kGeluTanh) && !gemm::swish_in_epilogue) continue;
              const bool accumulate = flags & 1, last = flags & 2, bias = flags & 4;
              // A as channel blocks of S: [depth / S][R][S] (plane R * S).
              std::vector<float> a(static_cast<size_t>(depth * R)), b(static_cast<size_t>(2 * depth * 16)), bs(32),
                  y(2 * kSecond);
              fill(a), fill(b), fill(bs), fill(y);
              const std::vector<float> before = y;
              gemm::Epilogue e{bias ? bs.data() : nullptr, accumulate, last, act == kRelu || act == kRelu6};
              e.cap = act == kRelu6 ? 6.0f : 0.0f;
              e.hardswish = act == kHardswish;
              e.swish = act == kSwish;
              e.gelu = act == kGelu || act == kGeluTanh;
              e.gelu_tanh = act == kGeluTanh;
              gemm::Epilogue e1 = e;
              if (bias) e1.bias = bs.data() + 16;
              const gemm::Output o0{y.data(), kStride, half}, o1{y.data() + kSecond, kStride, half};
              const auto at = [&](int r, int64_t k) { return a[static_cast<size_t>((k / S * R + r) * S + k % S)]; };
              const gemm::BlockedA<S> blocks{a.data(), R * S};
              if (pair && blocked) gemm::tile2_of<R>(blocks, b.data(), b.data() + depth * 16, depth, o0, o1, e, e1);
              if (pair && !blocked) gemm::tile2_of<R>(at, b.data(), b.data() + depth * 16, depth, o0, o1, e, e1);
              if (!pair && blocked) gemm::tile_of<R>(blocks, b.data(), depth, o0, e);
              if (!pair && !blocked) gemm::tile_of<R>(at, b.data(), depth, o0, e);
              const std::string what = "depth " + std::to_string(depth) + " half " + std::to_string(half) + " flags " +
                                       std::to_string(flags) + " activation " + std::to_string(act) + " pair " +
                                       std::to_string(pair) + " blocked " + std::to_string(blocked);
              std::vector<bool> written(y.size(), false);
              for (int p = 0; p <= pair; ++p)
                for (int r = 0; r < R; ++r)
                  for (int j = 0; j < 16; ++j) {
                    if (half == 0 && j >= 8) continue;
                    const size_t at_y = static_cast<size_t>(p * kSecond + r * kStride + (j < 8 ? j : half + j - 8));
                    double sum = 0;
                    for (int64_t k = 0; k < depth; ++k)
                      sum += double(at(r, k)) * b[static_cast<size_t>((p * depth + k) * 16 + j)];
                    float want = static_cast<float>(sum) + (accumulate ? before[at_y] : 0.0f);
                    if (last) want = activate(want + (bias ? bs[static_cast<size_t>(p * 16 + j)] : 0.0f), act);
                    ASSERT_NEAR(y[at_y], want, 2e-4 * (1 + std::fabs(want))) << what << " row " << r << " column " << j;
                    written[at_y] = true;
                    ++checked;
                  }
              for (size_t i = 0; i < y.size(); ++i) {
                if (written[i]) continue;
                ASSERT_EQ(y[i], before[i]) << what << ": element " << i << " outside the tile changed";
              }
            }
  EXPECT_GT(checked, 100000);
}

// The kernels' block sizes follow the caches: a pair of weight panels' slice
// and a tile's rows of x fit in L1, x's block takes a seventh of L2, a
// convolution panel's slice a quarter; where the CPU reports no caches (or
// sizes no core has), sizes every x86 core has.
TEST(LayoutKernels, BlockSizesFollowTheCaches) {
  const int64_t per_term = (2 * cpu::gemm::kCols + cpu::gemm::kRows) * 4;
  for (auto [l1, l2] : std::vector<std::pair<int64_t, int64_t>>{{48 << 10, 1 << 20}, {32 << 10, 256 << 10},
                                                                 {48 << 10, 2 << 20}, {64 << 10, 512 << 10}}) {
    const cpu::CpuCaches caches = cpu::caches_from_reports(l1, l2);
    const std::string what = "L1 " + std::to_string(l1 >> 10) + " KB, L2 " + std::to_string(l2 >> 10) + " KB";
    const int64_t depth = cpu::linear_pass_depth(caches), rows = cpu::linear_block_rows(caches, depth);
    EXPECT_LE(depth * per_term, l1) << what;
    EXPECT_GT(2 * depth * per_term, l1) << what << ": twice the depth fits too";
    EXPECT_EQ(rows % cpu::gemm::kRows, 0) << what;
    EXPECT_LE(rows * depth * 4, l2 / 7) << what;
    EXPECT_GT((rows + cpu::gemm::kRows) * depth * 4, l2 / 7) << what;
    EXPECT_EQ(cpu::patch_pass_depth(caches) * cpu::gemm::kCols * 4, l2 / 4) << what;
  }
  EXPECT_EQ(cpu::linear_pass_depth(cpu::caches_from_reports(48 << 10, 1 << 20)), 256);
  EXPECT_EQ(cpu::linear_block_rows(cpu::caches_from_reports(48 << 10, 1 << 20), 256), 144);
  const cpu::CpuCaches unknown = cpu::caches_from_reports(0, -1);
  const cpu::CpuCaches absurd = cpu::caches_from_reports(1, int64_t{1} << 40);
  EXPECT_EQ(unknown.l1d_bytes, 32 << 10);
  EXPECT_EQ(unknown.l2_bytes, 512 << 10);
  EXPECT_EQ(absurd.l1d_bytes, 16 << 10);
  EXPECT_EQ(absurd.l2_bytes, 4 << 20);
  const cpu::CpuCaches& here = cpu::cpu_caches();
  EXPECT_GE(here.l1d_bytes, 16 << 10);
  EXPECT_LE(here.l2_bytes, 4 << 20);
}

// A strided, dilated first layer with 3 channels: the weight and bias
// gradients from a blocked output gradient equal autograd's.
TEST(LayoutKernels, FewChannelWeightGradientMatchesAutograd) {
  manual_seed(3);
  for (int block : {8, 16}) {
    Tensor x = randn({2, 3, 11, 10}), w = randn({16, 3, 3, 3}), b = randn({16});
    w.set_requires_grad();
    b.set_requires_grad();
    ConvOptions opts;
    opts.stride = {2, 1};
    opts.padding = {1, 2};
    opts.dilation = {1, 2};
    Tensor y = conv2d(x, w, b, opts);
    Tensor gy = randn(y.shape());
    sum(y * gy).backward();
    const Shape& ys = y.shape();
    onednn::ConvShape s{2, 3, 11, 10, 16, 3, 3, ys[2], ys[3], 2, 1, 1, 2, 1, 2, 1};
    ASSERT_TRUE(cpu::few_channel_weight_grad_applies(s, block));
    Tensor gw = Tensor::empty({16, 3, 3, 3}), gb = Tensor::empty({16});
    cpu::conv_weight_grad_few_channels(s, block, x.data<float>(), to_blocked(gy, block).data<float>(), gw.data<float>(),
                                       gb.data<float>());
    std::string block_name = "block ";
    block_name.append(std::to_string(block));
    expect_near_all(gw, w.grad(), 1e-4, block_name);
    expect_near_all(gb, b.grad(), 1e-4, block_name);
  }
}

// 1x1 convolutions from and to either block size: output channels in whole
// panels, pairs of panels, and ending in half a panel (40, 72, 136); pixel
// counts that are not whole tiles, down to one (a squeeze-and-excitation);
// enough pairs of panels that threads take pixels fastest (136 channels); a
// batch; and every epilogue: bias and ReLU, a residual, a hard-swish.
TEST(LayoutKernels, PointwisePatchGemmMatchesTheConvolutionBetweenBlockSizes) {
  manual_seed(14);
  struct Case {
    int64_t n, c, o, h, w;
  };
  for (const Case& k : {Case{1, 48, 40, 14, 14}, Case{2, 32, 72, 5, 3}, Case{1, 16, 96, 7, 7}, Case{1, 64, 24, 1, 1},
                        Case{1, 320, 136, 5, 7}})
    for (int src_block : {8, 16})
      for (int dst_block : {8, 16})
        for (int epilogue = 0; epilogue < 6; ++epilogue) {  // none; bias + relu; + residual; hardswish; relu capped; silu
          if (k.c % src_block || k.o % dst_block || (epilogue == 5 && !cpu::gemm::swish_in_epilogue)) continue;
          const std::string what =
              describe("n c o h w src dst epilogue", {k.n, k.c, k.o, k.h, k.w, src_block, dst_block, epilogue});
          Tensor x = randn({k.n, k.c, k.h, k.w}), w = randn({k.o, k.c, 1, 1}) * 0.2, b = randn({k.o});
          Tensor residual = randn({k.n, k.o, k.h, k.w});
          const Tensor biased = conv2d(x, w, b);
          Tensor want = epilogue == 3   ? hardswish(biased)
                        : epilogue == 4 ? clamp(biased, 0.0, 1.5)
                        : epilogue == 5 ? biased * sigmoid(biased)
                                        : expected_conv(x, w, b, {}, epilogue, residual);
          onednn::LayoutCall call;
          call.shape = {k.n, k.c, k.h, k.w, k.o, 1, 1, k.h, k.w, 1, 1, 0, 0, 1, 1, 1};
          call.src_block = src_block;
          call.dst_block = dst_block;
          call.relu = epilogue == 1 || epilogue == 2 || epilogue == 4;
          call.cap = epilogue == 4 ? 1.5f : 0.0f;
          call.residual = epilogue == 2;
          call.hardswish = epilogue == 3;
          call.swish = epilogue == 5;
          ASSERT_TRUE(cpu::patch_gemm_applies(call)) << what;
          Tensor packed = Tensor::empty({cpu::patch_gemm_weights_size(call.shape)});
          cpu::patch_gemm_weights(call.shape, src_block, w.contiguous().data<float>(), packed.data<float>());
          Tensor y = epilogue == 2 ? to_blocked(residual, dst_block) : Tensor::empty(want.shape());
          cpu::patch_gemm_conv(call, to_blocked(x, src_block).data<float>(), packed.data<float>(),
                               epilogue ? b.data<float>() : nullptr, y.data<float>());
          expect_near_all(y, to_blocked(want, dst_block), 1e-4, what);
        }
}

// The fused first layer of inference graphs: convolution, bias, ReLU and a
// 2x2 max pool in one pass, including an odd convolution output (the pool
// drops its last row and column) and a stride; only for small patches.
TEST(LayoutKernels, FirstLayerConvolutionReluAndPoolMatchTheirOps) {
  manual_seed(4);
  for (int block : {8, 16}) {
    for (int64_t stride : {1, 2}) {
      Tensor x = randn({2, 3, 13, 12}), w = randn({16, 3, 3, 3}), b = randn({16});
      ConvOptions opts;
      opts.stride = {stride, stride};
      opts.padding = {1, 1};
      Tensor conv = conv2d(x, w, b, opts), want = max_pool2d(relu(conv), {2, 2});
      const Shape &cs = conv.shape(), &ps = want.shape();
      onednn::ConvShape s{2, 3, 13, 12, 16, 3, 3, cs[2], cs[3], stride, stride, 1, 1, 1, 1, 1};
      ASSERT_TRUE(cpu::conv_relu_pool_applies(s, block, {2, 2, 2, 2, 0, 0, 1, 1}));
      Tensor y = Tensor::empty(ps);
      cpu::conv_relu_pool_few_channels(s, block, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>());
      std::string what = "block, stride:";
      what.append(" ").append(std::to_string(block)).append(" ").append(std::to_string(stride));
      expect_near_all(y, to_blocked(want, block), 1e-5, what);
    }
  }
  // Larger patches run faster on oneDNN's kernel and a pool after it.
  const onednn::ConvShape stem{1, 3, 224, 224, 64, 7, 7, 112, 112, 2, 2, 3, 3, 1, 1, 1};
  EXPECT_FALSE(cpu::conv_relu_pool_applies(stem, 16, {2, 2, 2, 2, 0, 0, 1, 1})) << "a 7x7 stem over 3 channels";
}

// Blocked max pooling against the plain pool, bit for bit: 3x3 windows with
// and without padding, stride 1 and 2, ceil_mode's partial last windows,
// 2x2 and other windows, both block sizes, inputs holding NaN (which wins,
// as in the plain pool) and infinities, and threads split by channel blocks
// or by bands of rows.
TEST(LayoutKernels, BlockedMaxPoolMatchesThePlainPool) {
  manual_seed(8);
  struct Case {
    int64_t k, s, p;
    bool ceil;
    int64_t h, w;
  };
  for (int block : {8, 16})
    for (const Case& c : {Case{3, 2, 0, false, 15, 15}, Case{3, 2, 1, false, 14, 13}, Case{3, 2, 0, true, 14, 12},
                          Case{3, 1, 1, false, 9, 10}, Case{3, 2, 1, true, 16, 17}, Case{2, 2, 0, false, 10, 9},
                          Case{2, 2, 0, true, 9, 9}, Case{5, 3, 2, false, 13, 11}})
      for (bool special : {false, true}) {
        Tensor x = randn({2, 2 * block, c.h, c.w});
        if (special) {  // a few NaN and infinities, in different lanes and rows
          float* v = x.data<float>();
          const int64_t n = x.numel();
          for (int64_t i : {int64_t{5}, n / 3, n / 2 + 7}) v[i] = std::numeric_limits<float>::quiet_NaN();
          v[n / 4] = std::numeric_limits<float>::infinity();
          v[n / 5] = -std::numeric_limits<float>::infinity();
        }
        Tensor want = to_blocked(max_pool2d(x, {c.k, c.k}, {c.s, c.s}, {c.p, c.p}, c.ceil), block);
        const Shape& ws = want.shape();
        for (bool row_bands : {false, true}) {
          Tensor y = Tensor::empty(ws);
          cpu::max_pool_blocked(to_blocked(x, block).data<float>(), y.data<float>(), 2, 2 * block, c.h, c.w, ws[2],
                                ws[3], block, {c.k, c.k, c.s, c.s, c.p, c.p, 1, 1}, row_bands);
          const auto got = y.to_vector<float>(), expected = want.to_vector<float>();
          const std::string what = "block " + std::to_string(block) + ", kernel " + std::to_string(c.k) +
                                   ", stride " + std::to_string(c.s) + ", pad " + std::to_string(c.p) +
                                   (c.ceil ? ", ceil" : "") + (special ? ", NaN and infinities" : "") +
                                   (row_bands ? ", row bands" : "");
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_TRUE(got[i] == expected[i] || (std::isnan(got[i]) && std::isnan(expected[i])))
                << what << ", element " << i << ": " << got[i] << " against " << expected[i];
        }
      }
}

}  // namespace

namespace {
using namespace kiln;

// The channel shuffle kernel in both block sizes (whatever the machine's),
// in 2 groups (interleaved 4-lane runs) and 3 (lane by lane), from x or
// from its groups' parts, into y or into its halves: against the plain
// view-transpose-view.
TEST(LayoutKernels, ChannelShuffleMatchesTheViewTransposeView) {
  manual_seed(31);
  for (int block : {8, 16})
    for (int64_t groups : {2, 3}) {
      const int64_t channels = groups * 2 * block, per_group = channels / groups;
      Tensor x = randn({2, channels, 3, 5});
      Tensor want = x.view({2, groups, per_group, 3, 5}).permute({0, 2, 1, 3, 4}).contiguous().view(x.shape());
      const graph::CustomKernel shuffle = graph::blocked_channel_shuffle_kernel(groups, block);
      std::vector<Tensor> parts;
      for (int64_t k = 0; k < groups; ++k) parts.push_back(to_blocked(x.slice(1, k * per_group, (k + 1) * per_group), block));
      for (const auto& in : {std::vector<Tensor>{to_blocked(x, block)}, parts}) {
        std::vector<Tensor> whole{Tensor::empty(x.shape())};
        shuffle(in, whole);
        expect_near_all(whole[0], to_blocked(want, block), 0, "whole, block " + std::to_string(block));
        std::vector<Tensor> halves{Tensor::empty({2, channels / 2, 3, 5}), Tensor::empty({2, channels / 2, 3, 5})};
        shuffle(in, halves);
        for (int64_t h = 0; h < 2; ++h)
          expect_near_all(halves[static_cast<size_t>(h)],
                          to_blocked(want.slice(1, h * channels / 2, (h + 1) * channels / 2), block), 0,
                          "half " + std::to_string(h) + ", " + std::to_string(groups) + " groups, block " + std::to_string(block));
      }
    }
}

}  // namespace

namespace {
using namespace kiln;

// Training batch norm on blocked activations against the plain op and its
// gradient: the normalized output (with a residual and a ReLU after it), the
// saved statistics, the running statistics and all three gradients (with a
// ReLU's backward before it), on activations far from zero mean, for both
// block sizes and image counts below and above the thread count.
TEST(LayoutKernels, BlockedBatchNormTrainsAsThePlainOpDoes) {
  manual_seed(4);
  struct Case {
    int64_t n, c, h, w;
    int block;
  };
  for (const Case& k : {Case{1, 16, 5, 7, 16}, Case{3, 32, 6, 6, 16}, Case{5, 8, 9, 4, 8}, Case{2, 24, 3, 3, 8}}) {
    const std::string what = "n " + std::to_string(k.n) + " c " + std::to_string(k.c) + " block " + std::to_string(k.block);
    Tensor x = randn({k.n, k.c, k.h, k.w}) * 3.0 + 40.0, residual = randn({k.n, k.c, k.h, k.w});
    Tensor weight = randn({k.c}), bias = randn({k.c}), gy = randn({k.n, k.c, k.h, k.w});
    Tensor rm_plain = randn({k.c}), rv_plain = rand({k.c}) + 0.5;
    Tensor rm = rm_plain.clone(), rv = rv_plain.clone();
    auto plain = call("batch_norm", {x, weight, bias, rm_plain, rv_plain}, {{"training", true}, {"momentum", 0.2}, {"eps", 1e-5}});
    Tensor a_plain = relu(plain[0] + residual);
    // Blocked: y = relu(bn(x) + residual) in one pass.
    std::vector<Tensor> in = {to_blocked(x, k.block), weight, bias, rm, rv, to_blocked(residual, k.block)};
    std::vector<Tensor> out = {Tensor::empty(x.shape()), Tensor::empty({k.c}), Tensor::empty({k.c})};
    graph::batch_norm_train_kernel(0.2, 1e-5, k.block, true)(in, out);
    expect_near_all(out[0], to_blocked(a_plain, k.block), 1e-6, what + ", y");
    expect_near_all(out[1], plain[1], 1e-6, what + ", mean");
    expect_near_all(out[2], plain[2], 1e-5, what + ", rstd");
    expect_near_all(rm, rm_plain, 1e-6, what + ", running mean");
    expect_near_all(rv, rv_plain, 1e-5, what + ", running variance");
    // Backward with the ReLU's mask: g = relu_backward(gy, a).
    Tensor g = call("relu_backward", {gy, a_plain})[0];
    auto want = call("batch_norm_backward", {g, x, weight, plain[1], plain[2]}, {{"training", true}});
    std::vector<Tensor> bin = {to_blocked(gy, k.block), to_blocked(x, k.block), weight, out[1], out[2],
                               to_blocked(a_plain, k.block)};
    std::vector<Tensor> bout = {Tensor::empty(x.shape()), Tensor::empty({k.c}), Tensor::empty({k.c})};
    graph::batch_norm_grad_kernel(k.block)(bin, bout);
    expect_near_all(bout[0], to_blocked(want[0], k.block), 1e-6, what + ", gx");
    expect_near_all(bout[1], want[1], 1e-5, what + ", gw");
    expect_near_all(bout[2], want[2], 1e-5, what + ", gb");
  }
}

}  // namespace

#if defined(__AVX512F__)
namespace {

// The patch GEMM's SiLU epilogue: x * sigmoid(x) as the eager ops compute
// it, within float32 rounding, at the ends of its range and through NaN.
TEST(LayoutKernels, SiluEpilogueMatchesTheOpsEverywhere) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  alignas(64) float in[16] = {nan, -inf, inf, 0.0f, -0.0f, 1.0f, -1.0f, 20.0f, -20.0f, 87.0f, -87.0f, 100.0f, -100.0f,
                              0.3f, -5.5f, 1e-30f};
  alignas(64) float out[16];
  _mm512_store_ps(out, cpu::gemm::silu16(_mm512_load_ps(in)));
  const Tensor x = from_vector<float>(std::vector<float>(in, in + 16), {16});
  const std::vector<float> want = (x * sigmoid(x)).to_vector<float>();
  for (int i = 0; i < 16; ++i) {
    SCOPED_TRACE(::testing::Message() << "x = " << in[i]);
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      EXPECT_EQ(std::isnan(out[i]), std::isnan(want[i])) << out[i];
      if (std::isinf(want[i])) {
        EXPECT_EQ(out[i], want[i]);
      }
    } else {
      EXPECT_NEAR(out[i], want[i], 4e-7 * std::abs(want[i]) + 1e-37) << out[i];
    }
  }
}

}  // namespace
#endif

namespace {

// A capped ReLU (ReLU6) is applied by the direct kernel's pass and the patch
// GEMM's epilogue; Winograd's epilogue has no cap, so a call with one is
// never given Winograd, even where Winograd is the fastest without it.
TEST(LayoutKernels, CappedCallsAreNeverGivenWinograd) {
  const int block = static_cast<int>(onednn::preferred_block());
  if (block == 0) GTEST_SKIP() << "oneDNN prefers plain layouts on this CPU";
  onednn::LayoutCall call;
  call.shape = {1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1, 1};
  call.src_block = call.dst_block = block;
  call.bias = call.relu = true;
  const cpu::ConvAlgorithm uncapped = cpu::fastest_conv_algorithm(call);
  call.cap = 6.0f;
  const cpu::ConvAlgorithm capped = cpu::fastest_conv_algorithm(call);
  EXPECT_NE(capped, cpu::ConvAlgorithm::Winograd2x2);
  EXPECT_NE(capped, cpu::ConvAlgorithm::Winograd4x4);
  RecordProperty("uncapped_algorithm", static_cast<int>(uncapped));
}

}  // namespace

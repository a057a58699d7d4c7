#include "backends/cpu/passes/int8_tiles.h"

#include "backends/cpu/int8_depthwise.h"
#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/int8_patch_conv.h"
#include "kiln/tensor.h"

namespace kiln::graph::int8_tiles {
namespace {

namespace gemm = cpu::int8_gemm;
using cpu::onednn::ConvShape;
using cpu::onednn::QuantizedConvCall;

bool is_one_by_one(const ConvShape& s) {
  return s.groups == 1 && s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0 && s.oh == s.h &&
         s.ow == s.w;
}

bool is_depthwise(const ConvShape& s) { return s.groups == s.c && s.o == s.c && s.dh == 1 && s.dw == 1; }

cpu::int8_depthwise::Geometry depthwise_of(const ConvShape& s) {
  return {s.n, s.c, s.h, s.w, s.kh, s.kw, s.oh, s.ow, s.sh, s.sw, s.ph, s.pw};
}

}  // namespace

bool take_matmul(int64_t k) {
  return gemm::available() && cpu::onednn::int8_isa_is_avx512_vnni() && gemm::takes_depth(k);
}

bool take_conv(const QuantizedConvCall& call) {
  const ConvShape& s = call.shape;
  if (!call.x_nhwc || !call.y_nhwc) return false;
  if (is_one_by_one(s)) return take_matmul(s.c);
  if (cpu::int8_patch_conv::takes(s)) return cpu::onednn::int8_isa_is_avx512_vnni();
  // Depthwise layers of int8 input only: oneDNN's kernels for those ran
  // 3x slower than for uint8 input, and with uint8 input, though Kiln's ran
  // MobileNetV2's depthwise layers 1.1-2.4x faster than oneDNN's, the model
  // as a whole ran 2% slower (2-core Intel Sapphire Rapids): the time moved
  // to the layers around them.
  return is_depthwise(s) && call.x_signed && cpu::onednn::int8_isa_is_avx512_vnni() &&
         cpu::int8_depthwise::takes(depthwise_of(s));
}

int64_t packed_bytes(int64_t k, int64_t n) { return gemm::packed_bytes(k, n); }

std::string layout(int64_t k, int64_t n) { return "kiln int8 panels " + std::to_string(k) + "x" + std::to_string(n); }

void pack_matmul(const int8_t* b, int64_t k, int64_t n, void* out) { gemm::pack(b, k, n, n, 1, out); }

int64_t conv_packed_bytes(const QuantizedConvCall& call) {
  const ConvShape& s = call.shape;
  if (is_depthwise(s)) return cpu::int8_depthwise::packed_bytes(depthwise_of(s));
  return is_one_by_one(s) ? gemm::packed_bytes(s.c, s.o) : cpu::int8_patch_conv::packed_bytes(s);
}

std::string conv_layout(const QuantizedConvCall& call) {
  const ConvShape& s = call.shape;
  if (is_depthwise(s))
    return "kiln int8 depthwise " + std::to_string(s.c) + "x" + std::to_string(s.kh) + "x" + std::to_string(s.kw);
  if (!is_one_by_one(s))
    return "kiln int8 patches " + std::to_string(s.o) + "x" + std::to_string(s.c) + "x" + std::to_string(s.kh) + "x" +
           std::to_string(s.kw);
  return layout(s.c, s.o);
}

void pack_conv(const QuantizedConvCall& call, const int8_t* w, void* out) {
  const ConvShape& s = call.shape;
  if (is_depthwise(s)) return cpu::int8_depthwise::pack(depthwise_of(s), w, out);
  if (!is_one_by_one(s)) return cpu::int8_patch_conv::pack(s, w, out);
  gemm::pack(w, s.c, s.o, 1, s.c, out);  // weights [o, c, 1, 1]: B(i, j) at j * c + i
}

CustomKernel matmul_kernel(const cpu::onednn::QuantizedMatmulCall& call, const std::vector<float>& scales,
                           int32_t a_zero, int32_t y_zero) {
  return [call, scales, a_zero, y_zero](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const auto& dq = call.dequantized;
    const size_t vector_at = call.bias ? 3 : 2, residual_at = vector_at + (dq.add_vector ? 1 : 0);
    gemm::Call c;
    c.m = call.m, c.k = call.k, c.n = call.n, c.lda = call.k, c.ldy = call.n;
    c.scales = scales.data(), c.per_column = call.per_column;
    c.bias = call.bias ? in[2].data<int32_t>() : nullptr;
    c.a_signed = call.a_signed, c.a_zero = a_zero, c.y_zero = y_zero, c.y_signed = call.y_signed;
    c.dequantized = dq;
    c.vector = dq.add_vector ? in[vector_at].data<float>() : nullptr;
    c.residual = dq.add_residual ? in[residual_at].data<float>() : nullptr;
    gemm::run(c, in[0].raw_data(), in[1].raw_data(), out[0].raw_data());
  };
}

CustomKernel integer_to_float_kernel(int64_t k, int64_t n, bool a_signed, const Tensor& b_scale, bool bias) {
  return [k, n, a_signed, b_scale = b_scale.contiguous(), bias](const std::vector<Tensor>& in,
                                                                std::vector<Tensor>& out) {
    const std::vector<float> scales = cpu::onednn::integer_to_float_scales(cpu::onednn::scale_of(in[1]), b_scale, n);
    gemm::Call c;
    c.m = out[0].numel() / n, c.k = k, c.n = n, c.lda = k, c.ldy = n;
    c.scales = scales.data(), c.per_column = true, c.a_signed = a_signed, c.a_zero = cpu::onednn::zero_point_of(in[2]);
    c.to_float = true, c.vector = bias ? in[4].data<float>() : nullptr;
    const Tensor a = in[0].contiguous();  // (a view's elements in order)
    gemm::run(c, a.raw_data(), in[3].raw_data(), out[0].raw_data());
  };
}

CustomKernel conv_kernel(const QuantizedConvCall& call, const std::vector<float>& scales, int32_t x_zero,
                         int32_t y_zero) {
  return [call, scales, x_zero, y_zero](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const ConvShape& s = call.shape;
    const int32_t* bias = call.bias ? in[2].data<int32_t>() : nullptr;
    if (is_depthwise(s)) {
      const cpu::int8_depthwise::Requantization q{scales.data(), call.per_channel, bias,         call.x_signed,
                                                  x_zero,        y_zero,           call.y_signed};
      return cpu::int8_depthwise::run(depthwise_of(s), q, in[0].raw_data(), in[1].raw_data(), out[0].raw_data());
    }
    gemm::Call c;  // pixels by channels
    c.m = s.n * s.h * s.w, c.k = s.c, c.n = s.o, c.lda = s.c, c.ldy = s.o;
    c.scales = scales.data(), c.per_column = call.per_channel, c.bias = bias;
    c.a_signed = call.x_signed, c.a_zero = x_zero, c.y_zero = y_zero, c.y_signed = call.y_signed;
    if (!is_one_by_one(s))
      return cpu::int8_patch_conv::run(s, c, in[0].raw_data(), in[1].raw_data(), out[0].raw_data());
    gemm::run(c, in[0].raw_data(), in[1].raw_data(), out[0].raw_data());
  };
}

}  // namespace kiln::graph::int8_tiles

#include "backends/cpu/passes/int8_tiles.h"

#include "backends/cpu/int8_gemm.h"
#include "kiln/tensor.h"

namespace kiln::graph::int8_tiles {
namespace {

namespace gemm = cpu::int8_gemm;
using cpu::onednn::ConvShape;
using cpu::onednn::QuantizedConvCall;

bool is_one_by_one(const ConvShape& s) {
  return s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.ph == 0 && s.pw == 0 && s.oh == s.h && s.ow == s.w;
}

}  // namespace

bool take_matmul(int64_t k) { return gemm::available() && !cpu::onednn::int8_on_amx() && gemm::takes_depth(k); }

bool take_conv(const QuantizedConvCall& call) {
  return call.x_nhwc && call.y_nhwc && call.shape.groups == 1 && is_one_by_one(call.shape) && take_matmul(call.shape.c);
}

int64_t packed_bytes(int64_t k, int64_t n) { return gemm::packed_bytes(k, n); }

std::string layout(int64_t k, int64_t n) { return "kiln int8 panels " + std::to_string(k) + "x" + std::to_string(n); }

void pack_matmul(const int8_t* b, int64_t k, int64_t n, void* out) { gemm::pack(b, k, n, n, 1, out); }

int64_t conv_packed_bytes(const QuantizedConvCall& call) { return gemm::packed_bytes(call.shape.c, call.shape.o); }

std::string conv_layout(const QuantizedConvCall& call) { return layout(call.shape.c, call.shape.o); }

void pack_conv(const QuantizedConvCall& call, const int8_t* w, void* out) {
  // Weights [o, c, 1, 1]: B(i, j) at j * c + i.
  gemm::pack(w, call.shape.c, call.shape.o, 1, call.shape.c, out);
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

CustomKernel conv_kernel(const QuantizedConvCall& call, const std::vector<float>& scales, int32_t x_zero,
                         int32_t y_zero) {
  return [call, scales, x_zero, y_zero](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
    const ConvShape& s = call.shape;
    gemm::Call c;  // pixels by channels
    c.m = s.n * s.h * s.w, c.k = s.c, c.n = s.o, c.lda = s.c, c.ldy = s.o;
    c.scales = scales.data(), c.per_column = call.per_channel;
    c.bias = call.bias ? in[2].data<int32_t>() : nullptr;
    c.a_signed = call.x_signed, c.a_zero = x_zero, c.y_zero = y_zero, c.y_signed = call.y_signed;
    gemm::run(c, in[0].raw_data(), in[1].raw_data(), out[0].raw_data());
  };
}

}  // namespace kiln::graph::int8_tiles

#pragma once
// The int8 layout pass's use of Kiln's own int8 tiles (int8_gemm.h): which
// matrix products and convolutions they take, their weights' packing, and
// their kernels: matrix products of 8-bit rows, and 1x1 stride-1
// convolutions between channels-last layers, where oneDNN's instruction set
// is AVX-512 with VNNI (onednn::int8_isa_is_avx512_vnni: not AMX, whose
// tiles beat them, nor one ONEDNN_MAX_CPU_ISA holds lower); and depthwise
// ones of int8 input there on Kiln's depthwise kernel (int8_depthwise.h);
// and stems of a few input channels as an implicit GEMM over the padded
// image (int8_patch_conv.h). Other convolutions stay on oneDNN's brgemm
// kernels: run as that implicit GEMM, the tiles were no faster on
// ResNet-18's 3x3 layers inside the model, where oneDNN ran the 64-channel
// ones at 56x56 within 5% of vpdpbusd's peak (2-core Intel Sapphire Rapids).
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/onednn_int8.h"
#include "graph/ir.h"

namespace kiln::graph::int8_tiles {

// A product of depth k, where int8_isa_is_avx512_vnni.
bool take_matmul(int64_t k);
// A convolution, channels-last in and out: 1x1, stride 1, one group; a
// stem (int8_patch_conv::takes); or depthwise of int8 input (int8_depthwise::takes).
bool take_conv(const cpu::onednn::QuantizedConvCall& call);

// The packed weights of a [k, n] product: their size, a name for the
// layout (weights prepared once are shared by layout), and the packing.
int64_t packed_bytes(int64_t k, int64_t n);
std::string layout(int64_t k, int64_t n);
void pack_matmul(const int8_t* b, int64_t k, int64_t n, void* out);
// A 1x1 convolution's weights [o, c, 1, 1] as the product's [c, o]; a
// depthwise one's [c, 1, kh, kw] as int8_depthwise packs them.
int64_t conv_packed_bytes(const cpu::onednn::QuantizedConvCall& call);
std::string conv_layout(const cpu::onednn::QuantizedConvCall& call);
void pack_conv(const cpu::onednn::QuantizedConvCall& call, const int8_t* w, void* out);

// Kernels over (input, packed weights, bias where the call has one, then
// the matmul's dequantization vector and residual where it has them).
CustomKernel matmul_kernel(const cpu::onednn::QuantizedMatmulCall& call, const std::vector<float>& scales,
                           int32_t a_zero, int32_t y_zero);
CustomKernel conv_kernel(const cpu::onednn::QuantizedConvCall& call, const std::vector<float>& scales, int32_t x_zero,
                         int32_t y_zero);
// matmul_integer_to_float's over (a, a_scale, a_zero, packed b [k, n], then
// the float32 bias where it has one): the sums times a_scale * b_scales.
CustomKernel integer_to_float_kernel(int64_t k, int64_t n, bool a_signed, const Tensor& b_scale, bool bias);

}  // namespace kiln::graph::int8_tiles

#pragma once
// Integer convolutions and matrix products through oneDNN's int8 primitives
// (u8 or s8 activations, s8 weights, s32 accumulators), requantized in the
// primitive's epilogue: y = saturate(round((acc + bias) * scale[oc]) + y_zero)
// with acc the product of (x - x_zero) and w. Cached per geometry.
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/onednn_call.h"
#include "backends/cpu/onednn_conv.h"
#include "kiln/tensor.h"

namespace kiln::cpu::onednn {

struct QuantizedConvCall {
  ConvShape shape;
  bool x_signed = false, y_signed = false;  // int8 rather than uint8
  bool per_channel = false;                 // one scale per output channel, else one
  bool bias = false;                        // int32, in the accumulator's scale
  bool x_zero_point = true;                 // false: the input's zero point is 0
  // Activations stored channels-last ([N, H, W, C] in memory, NCHW by shape),
  // as graph mode keeps them between int8 layers; else plain NCHW.
  bool x_nhwc = false, y_nhwc = false;
  // The weights passed are already in the primitive's layout
  // (prepare_quantized_weights), as constant weights are once, rather than plain [o, c/g, kh, kw].
  bool prepared_weights = false;
};

// The requantization scales x_scale * w_scale / y_scale, per output channel
// (or one), in float32 as the primitives apply them, from the scale tensors.
std::vector<float> requantization_scales(const Tensor& x_scale, const Tensor& w_scale, const Tensor& y_scale);
// A uint8 or int8 zero point (one value) as an int.
int32_t zero_point_of(const Tensor& zero_point);
// The value of a scale given as a float32 tensor of one value.
float scale_of(const Tensor& scale);
// a_scale * b_scale for each of n columns (b_scale one value or n), as
// float32 products: a dynamically quantized product's multipliers.
std::vector<float> integer_to_float_scales(float a_scale, const Tensor& b_scale, int64_t n);

// Each returns false when oneDNN cannot express the call.
// scales: requantization_scales. memo: the call site's, where it has one.
bool quantized_conv_forward(const QuantizedConvCall& c, const void* x, int32_t x_zero, const void* w,
                            const float* scales, const int32_t* bias, int32_t y_zero, void* y,
                            PrimitiveMemo* memo = nullptr);
// The weights in the primitive's layout (with oneDNN's compensation terms):
// the size in bytes (0 when there is no primitive), a name for that layout,
// and the reorder into out.
int64_t quantized_weights_bytes(const QuantizedConvCall& c, const float* scales);
std::string quantized_weights_layout(const QuantizedConvCall& c, const float* scales);
void prepare_quantized_weights(const QuantizedConvCall& c, const float* scales, const int8_t* w, void* out);

struct QuantizedMatmulCall {
  int64_t m, k, n;  // a [m, k], b [k, n] (row-major), y [m, n]
  bool a_signed = false, y_signed = false;
  bool per_column = false;  // one scale per column of b, else one
  bool bias = false;        // int32 [n], in the accumulator's scale
  // b is already in the primitive's layout (prepare_quantized_matmul_weights),
  // which then has the scales built in.
  bool prepared_weights = false;
  // Float32 y: the quantized result dequantized in the epilogue, bit for bit
  // what a dequantize_linear after it gives, (q - y_zero) * y_scale, with q
  // rounded and saturated as the quantized output is; then plus a float32
  // [n] vector (a bias added after the dequantization), a residual and a
  // ReLU when asked.
  // y_zero is then fixed here rather than given at run time. With requantize,
  // that float result quantized again (a quantize_linear after it: the
  // matmul that reads it next takes 8-bit input), bit for bit as
  // quantize_linear does, saturate(round(v / q_scale) + q_zero), and y is
  // 8-bit (int8 when q_signed).
  struct Dequantized {
    bool on = false;
    float y_scale = 1;
    int32_t y_zero = 0;
    bool add_vector = false, relu = false;
    bool requantize = false;
    float q_scale = 1;
    int32_t q_zero = 0;
    bool q_signed = false;
    // After the vector, plus a float32 [m, n] tensor (a residual), before the
    // ReLU: the sum a separate add would give, bit for bit.
    bool add_residual = false;
  } dequantized;
};
// vector: the float32 [n] vector of c.dequantized.add_vector, else null;
// residual: the float32 [m, n] tensor of c.dequantized.add_residual, else null.
bool quantized_matmul(const QuantizedMatmulCall& c, const void* a, int32_t a_zero, const void* b, const float* scales,
                      const int32_t* bias, int32_t y_zero, void* y, const float* vector = nullptr,
                      const float* residual = nullptr, PrimitiveMemo* memo = nullptr);
// As for convolutions: the prepared weights' size (0: no primitive), layout in words, and the reorder.
int64_t quantized_matmul_weights_bytes(const QuantizedMatmulCall& c, const float* scales);
std::string quantized_matmul_weights_layout(const QuantizedMatmulCall& c, const float* scales);
void prepare_quantized_matmul_weights(const QuantizedMatmulCall& c, const float* scales, const int8_t* b, void* out);

// Whether the int8 kernels give the exact integer result for these weights:
// on CPUs with VNNI always; on the others, whose instructions add pairs of
// u8 x s8 products in 16 bits with saturation, only for uint8 inputs and
// weights within [-64, 63] (7 bits, as ONNX Runtime's reduce_range writes
// them for such CPUs): oneDNN halves the weights for int8 inputs there.
bool int8_products_exact(const int8_t* w, int64_t n, bool signed_input);

// Whether the instruction set oneDNN runs int8 products on here is AVX-512
// with VNNI and no AMX (ONEDNN_MAX_CPU_ISA may hold it lower): the one
// Kiln's own int8 kernels are for, which keep to that limit too; with AMX
// (8 times VNNI's products a cycle), oneDNN's primitives beat them.
bool int8_isa_is_avx512_vnni();
// Whether it is that or above it (AMX too): where the kernels that oneDNN
// has no match for (the product of two activations) run on Kiln's tiles.
bool int8_isa_has_avx512_vnni();

}  // namespace kiln::cpu::onednn

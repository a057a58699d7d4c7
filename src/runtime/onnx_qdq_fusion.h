#pragma once
// The QDQ form of a quantized model (QuantizeLinear/DequantizeLinear around
// float ops, as quantizers write it) turned into integer ops before the
// model runs: DequantizeLinear'd input and int8 weights -> Conv, MatMul or
// Gemm -> QuantizeLinear becomes QLinearConv, QLinearMatMul or QGemm
// (com.microsoft), and two DequantizeLinear'd operands -> MatMul or Add ->
// QuantizeLinear becomes QLinearMatMul or QLinearAdd (com.microsoft). A MaxPool, Reshape,
// Flatten, Transpose, Squeeze or Unsqueeze between a DequantizeLinear and a
// QuantizeLinear of the same scale and zero point runs on the quantized
// values. DequantizeLinear'd operands -> Concat, AveragePool or
// GlobalAveragePool (a Flatten after a pool may come before the
// QuantizeLinear) -> QuantizeLinear become QLinearConcat, QLinearAveragePool
// or QLinearGlobalAveragePool (com.microsoft); all run on int8 kernels. A
// ReLU or clip before the QuantizeLinear goes too where every value the
// output holds lies within its bounds (saturation then does its work).
// And quantize_dynamic's MatMul (DynamicQuantizeLinear'd input by symmetric
// int8 weights in MatMulInteger, Cast to float, times the product of the
// two scales, plus a bias) becomes MatMulIntegerToFloat (com.microsoft).
#include <onnx/onnx_pb.h>

#include <string>

namespace kiln::runtime {

struct QdqFusion {
  int conv = 0, matmul = 0, gemm = 0, add = 0, pool = 0, concat = 0, average_pool = 0;
  int moved = 0;    // Reshape, Flatten, Transpose, Squeeze, Unsqueeze on the quantized values
  int dynamic = 0;  // quantize_dynamic's MatMulInteger, Cast, Mul (and bias Add) as MatMulIntegerToFloat
  int total() const { return conv + matmul + gemm + add + pool + concat + average_pool + moved + dynamic; }
  std::string summary() const;  // "3 Conv, 1 Gemm, 2 Add on int8 kernels", "" when none
};

// Rewrites the main graph in place; subgraphs are left as they are.
QdqFusion fuse_qdq(::onnx::GraphProto& graph);

}  // namespace kiln::runtime

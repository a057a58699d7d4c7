#pragma once
// Post-training quantization of an ONNX model: calibrated on sample inputs,
// written in the QDQ form (QuantizeLinear/DequantizeLinear pairs around the
// float graph, int8 weights per output channel, int32 biases), which
// ONNX Runtime runs as well, and which Kiln's runtime runs on int8 kernels.
//
//   kiln::QuantizeResult q = kiln::quantize_model(bytes, batches);
//   q.save("model.int8.onnx");
//   std::printf("%s", q.report.str().c_str());
//
// Convolutions, matrix products and Gemm layers with constant weights are
// quantized; an activation's range comes from the calibration batches, its
// scale and zero point map it onto uint8 (or int8). A ReLU after a layer is
// kept inside the quantized layer (its output's range starts at zero).
#include <map>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

struct QuantizeOptions {
  // How an activation's range is chosen from the calibration values:
  // "minmax" (all of them), "percentile" (the `percentile` share of them
  // around the middle, clipping outliers) or "entropy" (the clip that loses
  // the least information: the smallest KL divergence between the values'
  // histogram and its quantized form).
  std::string method = "minmax";
  double percentile = 99.99;
  DType activations = DType::UInt8;  // or DType::Int8
  // Weights in 7 bits ([-63, 63]): what CPUs without VNNI compute exactly
  // on oneDNN's int8 kernels (and ONNX Runtime's, whose reduce_range this is).
  bool reduce_range = false;
  // Layers left in float32, by node name or output name.
  std::vector<std::string> keep_float;
  // Also leave in float32 the N quantized layers whose outputs changed most.
  int keep_sensitive = 0;
  // The share of calibration batches kept back to compare the quantized
  // model with the float one (none with a single batch: then it is reused).
  double held_out = 0.25;
  // Layers' input ranges given, not calibrated: by the layer's weight (its
  // initializer's name in the model, "fc1.weight"), the range a
  // quantization-aware training learned for that layer's input.
  std::map<std::string, std::pair<double, double>> input_ranges;
};

struct QuantizedLayer {
  std::string name, op;      // the node's name (or its output's) and ONNX type
  double relative_error = 0; // |q - f| / |f| of its output over the held-out batches
  bool kept_float = false;
};

struct QuantizedOutput {
  std::string name;
  double relative_error = 0, max_abs_error = 0;
  double top1_agreement = -1;  // [N, C] outputs: the share of rows whose argmax stayed; -1 otherwise
};

struct QuantizeReport {
  std::string method;
  bool weights_only = false;  // quantize_weights: layers' errors are their weights', no calibration
  int64_t calibration_batches = 0, held_out_batches = 0;
  int learned_input_ranges = 0;          // layers whose input range came from QuantizeOptions::input_ranges
  std::vector<QuantizedLayer> layers;    // most changed first
  std::vector<QuantizedOutput> outputs;  // in the model's order
  int quantized() const;
  std::string str() const;  // several lines, for a terminal
};

struct QuantizeResult {
  std::string model;  // the serialized QDQ ModelProto
  QuantizeReport report;
  // Writes the model atomically (a temporary file, then a rename).
  void save(const std::string& path) const;
};

// `calibration` holds batches of the model's inputs, in its input order.
// Throws naming the problem: a model without quantizable layers, an opset
// before 13 (per-channel QDQ needs 13), batches that do not fit the inputs.
QuantizeResult quantize_model(const std::string& model_bytes, const std::vector<std::vector<Tensor>>& calibration,
                              const QuantizeOptions& options = {});

// Weight-only quantization, as LLMs are deployed on CPUs: each MatMul with
// constant float weights [K, N] becomes com.microsoft's MatMulNBits, the
// weights in blocks of block_size along K of `bits` bits (per block: a
// scale and, unless symmetric, a zero point; rounded to nearest), which
// Kiln's matmul_nbits and ONNX Runtime run. No calibration: the
// activations stay float. The report's layers carry each weight's relative
// error, |dequantized - w| / |w|.
struct WeightQuantizeOptions {
  int64_t bits = 4;         // 2, 4 or 8
  int64_t block_size = 32;  // a power of two, at least 16
  bool symmetric = false;   // scale max |w| / (2^(bits-1) - 1) around the middle code; else min-max with a zero point
  // 0: products in float32; 4: the activations rounded to int8 per block at
  // run time too (ONNX Runtime's and Kiln's faster int8 products).
  int64_t accuracy_level = 0;
  std::vector<std::string> keep_float;  // MatMuls left in float32, by node name or output name
  // Also each Gather of rows of a constant float table [V, H] (token
  // embeddings), as com.microsoft's GatherBlockQuantized, in blocks along H
  // (H a multiple of block_size).
  bool embeddings = false;
};
QuantizeResult quantize_weights(const std::string& model_bytes, const WeightQuantizeOptions& options = {});

}  // namespace kiln

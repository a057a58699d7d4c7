#pragma once
// Quantization-aware training: convolutions and dense layers compute on
// their inputs and weights rounded as int8 inference will round them
// (fake quantization), so that training learns weights that survive it.
// Gradients pass straight through the rounding (and stop where a value lies
// outside the quantized range). After training, `kiln quantize` writes the
// model in the QDQ form on those weights, as after any training.
//
//   kiln::nn::quantize_aware(*model);   // or `quantize_aware: true` in a recipe
#include "kiln/nn.h"

namespace kiln::nn {

// x rounded to the grid scale * (q - zero_point), q in [qmin, qmax]; the
// gradient is 1 where x lies within the grid's range and 0 outside.
Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, double qmin, double qmax);
// Weights [out, ...] rounded as symmetric int8 per output channel (the
// largest magnitude of each channel to 127, or 63 with reduce_range).
Tensor fake_quantize_weights(const Tensor& w, bool reduce_range = false);

// Sees the range of the activations that pass (in training, a moving
// average of each batch's min and max, the first batch's as they are) and
// passes them fake-quantized to uint8 (or int8) over that range (as they
// are until it has seen a batch).
class ActivationQuantizer : public Cell {
 public:
  explicit ActivationQuantizer(DType type = DType::UInt8, double momentum = 0.01);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "ActivationQuantizer"; }
  Tensor running_min, running_max, observed;  // observed: 1 once a batch was seen

 private:
  double qmin_, qmax_, momentum_;
};

struct QuantizeAwareOptions {
  DType activations = DType::UInt8;  // or DType::Int8
  bool reduce_range = false;         // 7-bit weights, as kiln quantize --reduce-range
  double momentum = 0.01;            // of the activation ranges' moving average
};

// Makes every Conv2d and Dense in `model` fake-quantize its input and its
// weights from now on, in training and in evaluation; returns how many.
int64_t quantize_aware(Cell& model, const QuantizeAwareOptions& options = {});
// Turns the fake quantization of those layers off (and on again): the
// float model, as export writes it for kiln quantize.
void set_fake_quantization(Cell& model, bool enabled);

}  // namespace kiln::nn

// The standard layers, with PyTorch's default initialisation so that recipes
// and learning rates carry over.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/caller_language.h"
#include "kiln/generator.h"
#include "kiln/nn.h"
#include "kiln/nn/quantize_aware.h"

namespace kiln::nn {
using init::default_uniform;

Dense::Dense(int64_t in_features, int64_t out_features, bool with_bias) : in_(in_features), out_(out_features) {
  KILN_CHECK(in_features > 0 && out_features > 0, "Dense(", in_features, ", ", out_features,
             "): feature counts must be positive");
  weight = register_parameter("weight", default_uniform({out_features, in_features}, in_features));
  if (with_bias) bias = register_parameter("bias", default_uniform({out_features}, in_features));
}

Tensor Dense::construct(const Tensor& x) {
  if (x.dim() == 0 || x.shape().back() != in_) {
    std::string fix = "make the layer before it give " + std::to_string(in_) + " features, or build this one as Dense(" +
                      (x.dim() ? std::to_string(x.shape().back()) : std::string("1")) + ", " + std::to_string(out_) + ")";
    if (x.dim() >= 3 && numel_of(Shape(x.shape().begin() + 1, x.shape().end())) == in_)
      fix = "the input still has its image axes: add a Flatten before this layer";
    KILN_FAIL(display_name(), " (", in_, " -> ", out_, ") takes inputs [..., ", in_, "], got ", x.meta_str(), "; ",
              fix);
  }
  Tensor y = fake_quantization_ ? linear((*input_quantizer_)(x), nn::fake_quantize_weights(weight, reduce_range_), bias)
                                 : linear(x, weight, bias);
  return activation_ ? (*activation_)(y) : y;
}
void Dense::set_quantize_aware(std::shared_ptr<Cell> input_quantizer, bool reduce_range) {
  KILN_CHECK(input_quantizer != nullptr && !input_quantizer_, display_name(), " is quantization-aware already");
  input_quantizer_ = register_cell("input_quantizer", std::move(input_quantizer));
  reduce_range_ = reduce_range;
  fake_quantization_ = true;
}
void Conv2d::set_quantize_aware(std::shared_ptr<Cell> input_quantizer, bool reduce_range) {
  KILN_CHECK(input_quantizer != nullptr && !input_quantizer_, display_name(), " is quantization-aware already");
  input_quantizer_ = register_cell("input_quantizer", std::move(input_quantizer));
  reduce_range_ = reduce_range;
  fake_quantization_ = true;
}
void Dense::set_activation(std::shared_ptr<Cell> activation) {
  KILN_CHECK(activation != nullptr, display_name(), ": the activation is empty");
  KILN_CHECK(!activation_, display_name(), " already has an activation");
  activation_ = register_cell("activation", std::move(activation));
}
std::string Dense::extra_repr() const {
  return std::to_string(in_) + " -> " + std::to_string(out_) + (bias.defined() ? "" : ", no bias");
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options)
    : in_(in_channels), out_(out_channels), k_(kernel_size), o_(options) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0, "Conv2d(", in_channels, ", ", out_channels, ", ",
             kernel_size, "): channels and kernel size must be positive");
  KILN_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0,
             "Conv2d: channels must be divisible by groups (", options.groups, ")");
  int64_t fan_in = in_channels / options.groups * kernel_size * kernel_size;
  weight = register_parameter("weight", default_uniform({out_channels, in_channels / options.groups, kernel_size, kernel_size}, fan_in));
  if (options.bias) bias = register_parameter("bias", default_uniform({out_channels}, fan_in));
}

Tensor Conv2d::construct(const Tensor& x) {
  if (x.dim() != 4 || x.shape()[1] != in_) {
    // Images come channels-last from decoders: [N, H, W, C] with C the layer's channels is that, not a mistake of C.
    const bool channels_last = x.dim() == 4 && x.shape()[3] == in_ && x.shape()[1] != in_;
    std::string fix = x.dim() == 3 ? "a single image needs its batch axis: x.unsqueeze(0)"
                      : x.dim() != 4
                          ? "reshape the input into [N, C, H, W] (flat pixels: x.reshape({N, C, H, W}))"
                      : channels_last
                          ? std::string("the batch is channels-last [N, H, W, C]; put the channels first: ") +
                                in_caller_language("vision::hwc_to_chw() in the pipeline, or x.permute({0, 3, 1, 2})",
                                                   "vision.HWC2CHW() in the dataset's map, or x.permute(0, 3, 1, 2)")
                          : "make the layer before it give " + std::to_string(in_) + " channels, or build this one with " +
                                std::to_string(x.shape()[1]) + " input channels";
    KILN_FAIL(display_name(), " (", in_, " -> ", out_, " channels) takes inputs [N, ", in_, ", H, W], got ",
              x.meta_str(), "; ", fix);
  }
  ConvOptions c;
  c.stride = {o_.stride, o_.stride};
  c.padding = {o_.padding, o_.padding};
  c.dilation = {o_.dilation, o_.dilation};
  c.groups = o_.groups;
  if (fake_quantization_) return conv2d((*input_quantizer_)(x), nn::fake_quantize_weights(weight, reduce_range_), bias, c);
  return conv2d(x, weight, bias, c);
}

std::string Conv2d::extra_repr() const {
  return std::to_string(in_) + " -> " + std::to_string(out_) + ", kernel " + std::to_string(k_) + ", stride " +
         std::to_string(o_.stride) + ", padding " + std::to_string(o_.padding);
}

BatchNorm2d::BatchNorm2d(int64_t channels, double momentum, double eps) : momentum_(momentum), eps_(eps) {
  weight = register_parameter("weight", ones({channels}));
  bias = register_parameter("bias", zeros({channels}));
  running_mean = register_buffer("running_mean", zeros({channels}));
  running_var = register_buffer("running_var", ones({channels}));
}

Tensor BatchNorm2d::construct(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, "BatchNorm2d expects [N, C, H, W], got ", x.meta_str());
  if (sync_group_ >= 0 && training()) return synchronized(x);
  return batch_norm(x, weight, bias, running_mean, running_var, training(), momentum_, eps_);
}

// Per channel, the ranks' sums, sums of squares and counts added up in one
// all-reduce; the gradient flows back through it to every rank's inputs.
Tensor BatchNorm2d::synchronized(const Tensor& x) {
  const int64_t c = x.size(1);
  const Tensor count = full({1}, static_cast<double>(x.numel() / c), x.dtype(), x.device());
  const Tensor totals = all_reduce(concat({sum(x, {0, 2, 3}), sum(x * x, {0, 2, 3}), count}), sync_group_, "sum");
  const std::vector<Tensor> parts = split(totals, {c, c, 1});
  const Tensor n = parts[2];
  const Tensor mean = parts[0] / n;
  const Tensor var = parts[1] / n - mean * mean;  // biased, for normalizing
  {
    NoGradGuard no_grad;
    running_mean.copy_(running_mean * (1 - momentum_) + mean.detach() * momentum_);
    running_var.copy_(running_var * (1 - momentum_) + var.detach() * (n / (n - 1.0)) * momentum_);
  }
  const Shape per_channel{1, c, 1, 1};
  return (x - mean.reshape(per_channel)) * rsqrt(var + eps_).reshape(per_channel) * weight.reshape(per_channel) +
         bias.reshape(per_channel);
}

int convert_sync_batchnorm(Cell& cell, int64_t group) {
  int converted = 0;
  cell.apply([&](Cell& c) {
    if (auto* bn = dynamic_cast<BatchNorm2d*>(&c)) {
      bn->synchronize_over(group);
      ++converted;
    }
  });
  return converted;
}

SequentialCell::SequentialCell(std::vector<CellPtr> cells) {
  for (auto& c : cells) append(std::move(c));
}

void SequentialCell::append(CellPtr cell) { add_child(std::to_string(children().size()), std::move(cell)); }

Tensor SequentialCell::construct(const Tensor& x) {
  Tensor h = x;
  for (auto& [_, c] : children()) h = (*c)(h);
  return h;
}

namespace init {

void uniform(Tensor& t, double low, double high) {
  NoGradGuard guard;
  t.copy_(rand(t.shape(), t.dtype()) * (high - low) + low);
}
void normal(Tensor& t, double mean, double std) {
  NoGradGuard guard;
  t.copy_(randn(t.shape(), t.dtype()) * std + mean);
}
void constant(Tensor& t, double value) {
  NoGradGuard guard;
  t.fill_(value);
}
void zeros(Tensor& t) { constant(t, 0.0); }
void ones(Tensor& t) { constant(t, 1.0); }

std::pair<int64_t, int64_t> fans(const Tensor& w) {
  KILN_CHECK(w.dim() >= 2, "fan-in/fan-out need a weight of rank >= 2, got ", w.meta_str());
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.shape()[d];
  return {w.shape()[1] * receptive, w.shape()[0] * receptive};
}

Tensor default_uniform(const Shape& shape, int64_t fan_in) {
  double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  Tensor t = Tensor::empty(shape);
  uniform(t, -bound, bound);
  return t;
}

void xavier_uniform(Tensor& t, double gain) {
  auto [fan_in, fan_out] = fans(t);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform(t, -bound, bound);
}

void he_normal(Tensor& t) {
  auto [fan_in, fan_out] = fans(t);
  normal(t, 0.0, std::sqrt(2.0 / static_cast<double>(fan_in)));
}

}  // namespace init
}  // namespace kiln::nn

#include "kiln/nn/quantize_aware.h"

#include <functional>

#include "kiln/functional.h"
#include "kiln/grad_mode.h"

namespace kiln::nn {

Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, double qmin, double qmax) {
  const Tensor grid = round(x.detach() / scale) + zero_point;
  const Tensor q = (clamp(grid, qmin, qmax) - zero_point) * scale;
  const Tensor inside = cast(ge(grid, scalar_tensor(qmin, grid.dtype())), DType::Float32) *
                        cast(le(grid, scalar_tensor(qmax, grid.dtype())), DType::Float32);
  // Straight through inside the range: x plus the rounding, which carries no gradient.
  return where(cast(inside, DType::Bool), x + (q - x.detach()), q);
}

Tensor fake_quantize_weights(const Tensor& w, bool reduce_range) {
  std::vector<int64_t> others;
  for (int64_t d = 1; d < w.dim(); ++d) others.push_back(d);
  const double qmax = reduce_range ? 63.0 : 127.0;
  Shape per_channel(static_cast<size_t>(w.dim()), 1);
  per_channel[0] = w.shape()[0];
  Tensor peak = others.empty() ? abs(w.detach()) : amax(abs(w.detach()), others, true);
  const Tensor scale = maximum(peak, scalar_tensor(1e-12, w.dtype())) / qmax;
  return fake_quantize(w, scale, zeros_like(scale), -qmax, qmax);
}

ActivationQuantizer::ActivationQuantizer(DType type, double momentum) : momentum_(momentum) {
  KILN_CHECK(type == DType::UInt8 || type == DType::Int8, "ActivationQuantizer: uint8 or int8, not ", dtype_name(type));
  qmin_ = type == DType::Int8 ? -128 : 0;
  qmax_ = qmin_ + 255;
  running_min = register_buffer("running_min", zeros({}));
  running_max = register_buffer("running_max", zeros({}));
  observed = register_buffer("observed", zeros({}));
}

Tensor ActivationQuantizer::construct(const Tensor& x) {
  if (training()) {
    NoGradGuard no_grad;
    const Tensor seen = gt(observed, scalar_tensor(0.0));
    const Tensor lo = amin(x.detach()), hi = amax(x.detach());
    running_min.copy_(where(seen, running_min * (1 - momentum_) + lo * momentum_, lo));
    running_max.copy_(where(seen, running_max * (1 - momentum_) + hi * momentum_, hi));
    observed.fill_(1.0);
  }
  // The range holds zero, so that zero (padding, ReLU) stays exact.
  const Tensor lo = minimum(running_min, zeros({})), hi = maximum(running_max, zeros({}));
  const Tensor scale = maximum((hi - lo) / 255.0, scalar_tensor(1e-8));
  const Tensor zero_point = clamp(round(scalar_tensor(qmin_) - lo / scale), qmin_, qmax_);
  // Before any batch was seen (a model evaluated before training) there is no range: x passes as it is.
  return where(gt(observed, scalar_tensor(0.0)), fake_quantize(x, scale, zero_point, qmin_, qmax_), x);
}

namespace {

void each_layer(Cell& cell, const std::function<void(Cell&)>& f) {
  f(cell);
  for (auto& [name, child] : cell.children()) each_layer(*child, f);
}

}  // namespace

int64_t quantize_aware(Cell& model, const QuantizeAwareOptions& o) {
  int64_t n = 0;
  each_layer(model, [&](Cell& c) {
    if (auto* conv = dynamic_cast<Conv2d*>(&c)) {
      conv->set_quantize_aware(std::make_shared<ActivationQuantizer>(o.activations, o.momentum), o.reduce_range), ++n;
    } else if (auto* dense = dynamic_cast<Dense*>(&c)) {
      dense->set_quantize_aware(std::make_shared<ActivationQuantizer>(o.activations, o.momentum), o.reduce_range), ++n;
    }
  });
  KILN_CHECK(n > 0, "quantize_aware: the model has no Conv2d or Dense layer to quantize");
  return n;
}

void set_fake_quantization(Cell& model, bool enabled) {
  each_layer(model, [&](Cell& c) {
    if (auto* conv = dynamic_cast<Conv2d*>(&c)) conv->enable_fake_quantization(enabled);
    if (auto* dense = dynamic_cast<Dense*>(&c)) dense->enable_fake_quantization(enabled);
  });
}

}  // namespace kiln::nn

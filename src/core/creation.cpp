// Tensor creation: constants, ranges, random numbers, copies of host data.
#include <cmath>
#include <algorithm>
#include <cstring>

#include "core/device_memory.h"
#include "kiln/backend.h"
#include "kiln/generator.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

// Every `stride`-th element of t from element `first`, `count` of them,
// becomes start + i * step, by the device's backend.
void fill_affine(const Tensor& t, int64_t first, size_t count, int64_t stride, double start, double step) {
  if (count == 0) return;
  auto* at = static_cast<char*>(detail::device_address(t)) + first * static_cast<int64_t>(t.element_size());
  backend(t.device().type).fill_affine(at, count, stride, t.dtype(), start, step, t.device().index);
}

// start + i * step in every element.
Tensor affine(const Shape& shape, DType dtype, Device device, double start, double step) {
  Tensor t = Tensor::empty(shape, dtype, device);
  fill_affine(t, 0, static_cast<size_t>(t.numel()), 1, start, step);
  return t;
}

// Element i is number i of a draw that takes the generator's next numel() numbers.
Tensor random_tensor(const Shape& shape, DType dtype, Generator* gen, Device device, Backend::Draw draw) {
  Generator& g = gen ? *gen : default_generator();
  Tensor t = Tensor::empty(shape, dtype, device);
  draw.first = g.take(static_cast<uint64_t>(t.numel()));
  draw.seed = g.initial_seed();
  if (t.numel() > 0)
    backend(device.type).fill_random(detail::device_address(t), static_cast<size_t>(t.numel()), dtype, draw,
                                     device.index);
  return t;
}

Tensor floating_random(const Shape& shape, DType dtype, Generator* gen, Device device, Backend::Random kind) {
  KILN_CHECK(is_floating(dtype), kind == Backend::Random::Normal ? "randn" : "rand", " makes floating-point tensors, not ",
             dtype_name(dtype), "; use randint for integers");
  return random_tensor(shape, dtype, gen, device, {kind});
}

}  // namespace

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return affine(shape, dtype, device, value, 0.0);
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  KILN_CHECK(step != 0, "arange: step must not be 0");
  KILN_CHECK((end - start) / step >= 0, "arange: start ", start, ", end ", end, " and step ", step,
             " give no values; use a step whose sign points from start to end");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return affine({n}, dtype, device, start, step);
}
Tensor arange(int64_t end, DType dtype, Device device) { return arange(0.0, static_cast<double>(end), 1.0, dtype, device); }

// The last value is `end` itself, not start + (steps - 1) * delta rounded.
Tensor linspace(double start, double end, int64_t steps, DType dtype, Device device) {
  KILN_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  const double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  Tensor t = Tensor::empty({steps}, dtype, device);
  if (steps == 0) return t;
  fill_affine(t, 0, static_cast<size_t>(steps - 1), 1, start, delta);
  fill_affine(t, steps - 1, 1, 1, steps == 1 ? start : end, 0.0);
  return t;
}

Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype, Device device) {
  const int64_t cols = m.value_or(n);
  KILN_CHECK(n >= 0 && cols >= 0, "eye: sizes must be >= 0, got ", n, "x", cols);
  Tensor t = zeros({n, cols}, dtype, device);
  fill_affine(t, 0, static_cast<size_t>(std::min(n, cols)), cols + 1, 1.0, 0.0);  // the diagonal
  return t;
}

Tensor rand(const Shape& shape, DType dtype, Generator* gen, Device device) {
  return floating_random(shape, dtype, gen, device, Backend::Random::Uniform);
}
Tensor randn(const Shape& shape, DType dtype, Generator* gen, Device device) {
  return floating_random(shape, dtype, gen, device, Backend::Random::Normal);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Generator* gen, Device device) {
  KILN_CHECK(low < high, "randint: low (", low, ") must be below high (", high, ")");
  Backend::Draw draw{Backend::Random::Integers};
  draw.low = low;
  draw.high = high;
  return random_tensor(shape, dtype, gen, device, draw);
}

Tensor from_buffer(const void* data, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  if (t.numel() > 0) {
    KILN_CHECK(data != nullptr, "from_buffer: null data pointer for shape ", shape_str(shape));
    std::memcpy(t.raw_data(), data, static_cast<size_t>(t.numel()) * dtype_size(dtype));
  }
  return t;
}

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  KILN_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
             " values cannot fill shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> bytes(values.begin(), values.end());
    return from_buffer(bytes.data(), shape, DType::Bool);
  } else {
    return from_buffer(values.data(), shape, DTypeOf<T>::value);
  }
}
template Tensor from_vector(const std::vector<float>&, const Shape&);
template Tensor from_vector(const std::vector<double>&, const Shape&);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&);
template Tensor from_vector(const std::vector<int8_t>&, const Shape&);
template Tensor from_vector(const std::vector<bool>&, const Shape&);
template Tensor from_vector(const std::vector<Half>&, const Shape&);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&);

}  // namespace kiln

// Tensor creation: constants, ranges, random numbers, copies of host data.
#include <cmath>
#include <cstring>

#include "kiln/generator.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

template <typename F>
Tensor fill_with(const Shape& shape, DType dtype, F&& value_at) {
  Tensor t = Tensor::empty(shape, dtype);
  int64_t n = t.numel();
  KILN_DISPATCH_ALL(dtype, {
    auto* p = static_cast<scalar_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(value_at(i));
  });
  return t;
}

// Values are drawn in float64 and converted, so a seed gives the same numbers
// for every dtype.
Tensor random_tensor(const Shape& shape, DType dtype, Generator* gen, bool normal) {
  KILN_CHECK(is_floating(dtype), normal ? "randn" : "rand", " makes floating-point tensors, not ",
             dtype_name(dtype), "; use randint for integers");
  Generator& g = gen ? *gen : default_generator();
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  if (normal) {
    std::normal_distribution<double> dist(0.0, 1.0);
    for (auto& x : v) x = dist(g.engine());
  } else {
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    for (auto& x : v) x = dist(g.engine());
  }
  return fill_with(shape, dtype, [&](int64_t i) { return v[i]; });
}

}  // namespace

Tensor full(const Shape& shape, double value, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  int64_t n = t.numel();
  KILN_DISPATCH_ALL(dtype, {
    auto* p = static_cast<scalar_t*>(t.raw_data());
    scalar_t v = static_cast<scalar_t>(value);
    std::fill(p, p + n, v);
  });
  return t;
}
Tensor zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }

Tensor arange(double start, double end, double step, DType dtype) {
  KILN_CHECK(step != 0, "arange: step must not be 0");
  KILN_CHECK((end - start) / step >= 0, "arange: start ", start, ", end ", end, " and step ", step,
             " give no values; use a step whose sign points from start to end");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  return fill_with({n}, dtype, [&](int64_t i) { return start + static_cast<double>(i) * step; });
}
Tensor arange(int64_t end, DType dtype) { return arange(0.0, static_cast<double>(end), 1.0, dtype); }

Tensor linspace(double start, double end, int64_t steps, DType dtype) {
  KILN_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  double delta = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  return fill_with({steps}, dtype, [&](int64_t i) { return i == steps - 1 ? end : start + static_cast<double>(i) * delta; });
}

Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype) {
  int64_t cols = m.value_or(n);
  KILN_CHECK(n >= 0 && cols >= 0, "eye: sizes must be >= 0, got ", n, "x", cols);
  return fill_with({n, cols}, dtype, [&](int64_t i) { return (i / cols == i % cols) ? 1.0 : 0.0; });
}

Tensor rand(const Shape& shape, DType dtype, Generator* gen) { return random_tensor(shape, dtype, gen, false); }
Tensor randn(const Shape& shape, DType dtype, Generator* gen) { return random_tensor(shape, dtype, gen, true); }

Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype, Generator* gen) {
  KILN_CHECK(low < high, "randint: low (", low, ") must be below high (", high, ")");
  Generator& g = gen ? *gen : default_generator();
  std::uniform_int_distribution<int64_t> dist(low, high - 1);
  std::vector<int64_t> v(static_cast<size_t>(numel_of(shape)));
  for (auto& x : v) x = dist(g.engine());
  return fill_with(shape, dtype, [&](int64_t i) { return static_cast<double>(v[i]); });
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

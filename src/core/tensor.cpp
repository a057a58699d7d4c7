#include "kiln/tensor.h"

#include <cstring>

#include "graph/trace_hook.h"
#include "kiln/autograd.h"
#include "kiln/functional.h"
#include "kiln/registry.h"

namespace kiln {

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape)
    KILN_CHECK(d >= 0, "negative dimension in shape ", shape_str(shape), "; sizes must be >= 0");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<StorageImpl>(nbytes_of(shape, dtype_size(dtype)), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t axis) const { return shape()[normalize_axis(axis, dim())]; }
int64_t Tensor::numel() const { return numel_of(shape()); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const auto& sh = shape();
  const auto& st = strides();
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (graph::detail::tracing()) graph::detail::check_read(*this, "reading its data");
  return static_cast<char*>(impl().storage->data) + impl().offset * static_cast<int64_t>(element_size());
}

std::string Tensor::meta_str() const {
  if (!defined()) return "undefined";
  return std::string(dtype_name(dtype())) + shape_str(shape());
}

namespace {
template <typename T>
double element_as_double(const Tensor& t, int64_t linear) {
  // Logical index -> storage address through the strides.
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t size = t.shape()[d];
    off += (linear % size) * t.strides()[d];
    linear /= size;
  }
  const T* base = static_cast<const T*>(t.raw_data());
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(base[off]));
  } else {
    return static_cast<double>(base[off]);
  }
}
}  // namespace

template <typename T>
T Tensor::item() const {
  if (graph::detail::tracing()) graph::detail::check_read(*this, "item()");
  KILN_CHECK(numel() == 1, "item() needs a one-element tensor, but this one is ", meta_str(),
             "; index or reduce it first");
  double v = 0;
  KILN_DISPATCH_ALL(dtype(), v = element_as_double<scalar_t>(*this, 0));
  return static_cast<T>(v);
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  if (graph::detail::tracing()) graph::detail::check_read(*this, "to_vector()");
  Tensor c = to(DTypeOf<T>::value).contiguous();
  const T* p = static_cast<const T*>(c.raw_data());
  return std::vector<T>(p, p + c.numel());
}

#define KILN_INSTANTIATE_ACCESS(T)            \
  template T Tensor::item<T>() const;         \
  template std::vector<T> Tensor::to_vector<T>() const;
KILN_INSTANTIATE_ACCESS(float)
KILN_INSTANTIATE_ACCESS(double)
KILN_INSTANTIATE_ACCESS(int32_t)
KILN_INSTANTIATE_ACCESS(int64_t)
KILN_INSTANTIATE_ACCESS(uint8_t)
KILN_INSTANTIATE_ACCESS(bool)
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

Tensor& Tensor::set_requires_grad(bool on) {
  KILN_CHECK(!on || is_floating(dtype()), "requires_grad needs a floating-point tensor, but this one is ",
             meta_str(), "; convert it with .to(kiln::DType::Float32)");
  KILN_CHECK(is_leaf() || on, "set_requires_grad(false) on a non-leaf tensor; use detach() instead");
  impl().requires_grad = on;
  return *this;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward(*this, gradient, retain_graph);
}

Tensor Tensor::detach() const {
  auto impl2 = std::make_shared<TensorImpl>();
  impl2->storage = impl().storage;
  impl2->shape = shape();
  impl2->strides = strides();
  impl2->offset = offset();
  impl2->dtype = dtype();
  return Tensor(std::move(impl2));
}

// Views and copies go through registered ops so they are differentiable.
Tensor Tensor::view(const Shape& s) const { return call("view", {*this}, {{"shape", s}})[0]; }

Tensor Tensor::reshape(const Shape& s) const {
  static const OpDef& view_op = OpRegistry::instance().get("view");
  try {
    return call1(view_op, {*this}, {{"shape", s}});
  } catch (const Error&) {
    if (is_contiguous()) throw;  // the shape itself is wrong: report that
    return call1(view_op, {contiguous()}, {{"shape", s}});
  }
}

Tensor Tensor::transpose(int64_t a, int64_t b) const {
  std::vector<int64_t> order(dim());
  for (int64_t i = 0; i < dim(); ++i) order[i] = i;
  if (dim() > 0) std::swap(order[normalize_axis(a, dim())], order[normalize_axis(b, dim())]);
  return permute(order);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  return call("permute", {*this}, {{"order", order}})[0];
}

Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step) const {
  return call("slice", {*this}, {{"axis", axis}, {"start", start}, {"end", end}, {"step", step}})[0];
}

Tensor Tensor::select(int64_t axis, int64_t index) const {
  int64_t ax = normalize_axis(axis, dim());
  int64_t n = shape()[ax];
  KILN_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for axis ", axis, " of size ", n);
  if (index < 0) index += n;
  return slice(ax, index, index + 1).squeeze(ax);
}

Tensor Tensor::expand(const Shape& s) const { return call("expand", {*this}, {{"shape", s}})[0]; }

Tensor Tensor::squeeze(std::optional<int64_t> axis) const {
  Shape s;
  if (axis) {
    int64_t ax = normalize_axis(*axis, dim());
    KILN_CHECK(shape()[ax] == 1, "squeeze: axis ", *axis, " has size ", shape()[ax], ", not 1; only size-1 axes can be removed");
    for (int64_t i = 0; i < dim(); ++i)
      if (i != ax) s.push_back(shape()[i]);
  } else {
    for (int64_t d : shape())
      if (d != 1) s.push_back(d);
  }
  return reshape(s);
}

Tensor Tensor::unsqueeze(int64_t axis) const {
  int64_t ax = normalize_axis(axis, dim() + 1);
  Shape s = shape();
  s.insert(s.begin() + ax, 1);
  return reshape(s);
}

Tensor Tensor::flatten(int64_t start_axis, int64_t end_axis) const {
  if (dim() == 0) return reshape({1});
  int64_t a = normalize_axis(start_axis, dim()), b = normalize_axis(end_axis, dim());
  KILN_CHECK(a <= b, "flatten: start axis ", start_axis, " comes after end axis ", end_axis);
  Shape s(shape().begin(), shape().begin() + a);
  int64_t n = 1;
  for (int64_t i = a; i <= b; ++i) n *= shape()[i];
  s.push_back(n);
  s.insert(s.end(), shape().begin() + b + 1, shape().end());
  return reshape(s);
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }
Tensor Tensor::clone() const { return call("copy", {*this})[0]; }
Tensor Tensor::to(DType d) const { return d == dtype() ? *this : cast(*this, d); }

namespace {
void check_inplace(const Tensor& t, const char* what) {
  KILN_CHECK(!(t.requires_grad() && autograd::grad_enabled()), what, " on a tensor that requires grad (",
             t.meta_str(), "): autograd cannot track in-place changes; do it under kiln::NoGradGuard "
             "(e.g. an optimizer update) or use the out-of-place op");
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  static const OpDef& assign = OpRegistry::instance().get("assign");
  // A source that shares memory with the destination (x.copy_(x.t())) is read
  // from a copy, so no element is overwritten before it is read.
  Tensor from = src.to(dtype());
  if (from.impl().storage == impl().storage) from = from.clone();
  call(assign, {*this, from});  // bumps the version counter (assign writes its first input)
  return *this;
}

Tensor& Tensor::fill_(double value) { return copy_(scalar_tensor(value, dtype())); }

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  NoGradGuard guard;
  return copy_(alpha == 1.0 ? add(*this, other) : add(*this, mul(other, scalar_tensor(alpha, other.dtype()))));
}

Tensor& Tensor::mul_(double factor) {
  check_inplace(*this, "mul_");
  NoGradGuard guard;
  return copy_(mul(*this, scalar_tensor(factor, dtype())));
}

}  // namespace kiln

// The Tensor methods that are ops: views, copies, casts and in-place
// updates go through registered ops, so that they are differentiable, traced
// and profiled like any other. Declared in core's tensor.h, defined here.
#include "kiln/functional.h"
#include "kiln/grad_mode.h"
#include "kiln/registry.h"

namespace kiln {

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

Tensor Tensor::to(Device d) const {
  if (d == device()) return *this;
  static const OpDef& to_device = OpRegistry::instance().get("to_device");
  return call1(to_device, {contiguous()}, {{"device", d.str()}});
}

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

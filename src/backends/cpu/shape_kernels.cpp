// Kernels of the shape ops. View kernels only compute new shape/strides/offset
// over the same storage; the rest copy through strided_copy.
#include <algorithm>
#include <cstring>
#include <optional>

#include "backends/cpu/kernel_helpers.h"
#include "ops/shape_rules.h"

namespace kiln {
namespace cpu {
namespace {

// The strides that let `shape` view memory laid out as (old_shape, old_strides), if any.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape) {
  if (old_shape.empty() || numel_of(old_shape) == 0) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    if (d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

void view_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& x = in[0];
  Shape target = a.get_ints("shape");
  // `infer` already resolved -1 and checked the element count; recompute here.
  int64_t known = 1;
  for (int64_t s : target)
    if (s != -1) known *= s;
  for (int64_t& s : target)
    if (s == -1) s = known == 0 ? 0 : x.numel() / known;
  auto strides = view_strides(x.shape(), x.strides(), target);
  KILN_CHECK(strides.has_value(), "a tensor of shape ", shape_str(x.shape()), " with strides ", shape_str(x.strides()),
             " cannot be viewed as ", shape_str(target), " without a copy; use reshape(), or contiguous() first");
  out.resize(1);
  out[0] = alias(x, target, *strides, x.offset());
}

void permute_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& x = in[0];
  auto order = a.get_ints("order");
  Shape s(order.size());
  Strides st(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    int64_t ax = normalize_axis(order[i], x.dim());
    s[i] = x.shape()[ax];
    st[i] = x.strides()[ax];
  }
  out.resize(1);
  out[0] = alias(x, s, st, x.offset());
}

void slice_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t ax = normalize_axis(a.get_int("axis"), x.dim());
  int64_t start = a.get_int("start"), end = a.get_int("end"), step = a.get_int("step", 1), count = 0;
  detail::slice_bounds(x.shape()[ax], start, end, step, count);
  Shape s = x.shape();
  Strides st = x.strides();
  s[ax] = count;
  int64_t offset = x.offset() + (count > 0 ? start * st[ax] : 0);
  st[ax] *= step;
  out.resize(1);
  out[0] = alias(x, s, st, offset);
}

void expand_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& x = in[0];
  Shape target = a.get_ints("shape");
  Strides st(target.size(), 0);
  size_t lead = target.size() - x.shape().size();
  for (size_t i = 0; i < x.shape().size(); ++i) {
    if (target[lead + i] == -1) target[lead + i] = x.shape()[i];
    st[lead + i] = x.shape()[i] == 1 && target[lead + i] != 1 ? 0 : x.strides()[i];
  }
  out.resize(1);
  out[0] = alias(x, target, st, x.offset());
}

void split_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t ax = normalize_axis(a.get_int("axis", 0), x.dim());
  auto sizes = a.get_ints("sizes");
  out.resize(sizes.size());
  int64_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape s = x.shape();
    s[ax] = sizes[i];
    out[i] = alias(x, s, x.strides(), x.offset() + (sizes[i] > 0 ? at * x.strides()[ax] : 0));
    at += sizes[i];
  }
}

void zero_fill(Tensor& t) {
  std::memset(t.raw_data(), 0, static_cast<size_t>(t.numel()) * t.element_size());
}

void slice_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor& o = out[0];
  zero_fill(o);
  std::vector<Tensor> view;
  slice_kernel({o}, view, a);
  strided_copy(in[0], view[0]);
}

void concat_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor& o = out[0];
  int64_t ax = normalize_axis(a.get_int("axis", 0), o.dim());
  int64_t at = 0;
  for (const Tensor& t : in) {
    int64_t n = t.shape()[ax];
    std::vector<Tensor> view;
    slice_kernel({o}, view, {{"axis", ax}, {"start", at}, {"end", at + n}, {"step", int64_t{1}}});
    strided_copy(t, view[0]);
    at += n;
  }
}

enum class PadMode { Constant, Reflect, Replicate, Circular };

PadMode pad_mode(const Attrs& a) {
  const std::string m = a.get_string("mode", "constant");
  return m == "reflect" ? PadMode::Reflect : m == "replicate" ? PadMode::Replicate
                                          : m == "circular" ? PadMode::Circular : PadMode::Constant;
}

// Maps an index of the padded axis to the source index, or -1 (constant
// mode's fill): reflect mirrors about the edge, replicate repeats the edge,
// circular wraps around.
int64_t pad_source(int64_t i, int64_t before, int64_t size, PadMode mode) {
  int64_t j = i - before;
  if (j >= 0 && j < size) return j;
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Reflect: return j < 0 ? -j : 2 * (size - 1) - j;
    case PadMode::Replicate: return j < 0 ? 0 : size - 1;
    case PadMode::Circular: return ((j % size) + size) % size;
  }
  return -1;
}

// Row by row of the last axis: a row whose source row is padding is filled;
// another copies the source row's middle and maps only its edges.
template <typename T>
void pad_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[0]);
  Tensor& o = out[0];
  auto pads = a.get_ints("pads");
  const PadMode mode = pad_mode(a);
  T fill = static_cast<T>(a.get_float("value", 0.0));
  int64_t r = x.dim();
  if (o.numel() == 0) return;
  if (r == 0) {
    o.data<T>()[0] = x.data<T>()[0];
    return;
  }
  std::vector<int64_t> before(r, 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) before[r - 1 - i] = pads[2 * i];
  const T* src = x.data<T>();
  T* dst = o.data<T>();
  Strides xs = contiguous_strides(x.shape());
  const int64_t w = o.shape()[r - 1], xw = x.shape()[r - 1], lead = before[r - 1];
  // The output columns that copy source columns lead.., in one run.
  const int64_t mid0 = std::clamp<int64_t>(lead, 0, w), mid1 = std::clamp<int64_t>(lead + xw, mid0, w);
  const int64_t rows = o.numel() / w;
  parallel_for(rows, std::max<int64_t>(1, kGrainElements / std::max<int64_t>(w, 1)), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rem = row, off = 0;
      bool inside = true;
      for (int64_t d = r - 2; d >= 0; --d) {
        int64_t i = rem % o.shape()[d];
        rem /= o.shape()[d];
        int64_t s = pad_source(i, before[d], x.shape()[d], mode);
        if (s < 0) inside = false;
        else off += s * xs[d];
      }
      T* out_row = dst + row * w;
      if (!inside) {
        std::fill(out_row, out_row + w, fill);
        continue;
      }
      const T* in_row = src + off;
      auto edge = [&](int64_t i) {
        const int64_t s = pad_source(i, lead, xw, mode);
        out_row[i] = s < 0 ? fill : in_row[s];
      };
      for (int64_t i = 0; i < mid0; ++i) edge(i);
      std::copy(in_row + (mid0 - lead), in_row + (mid1 - lead), out_row + mid0);
      for (int64_t i = mid1; i < w; ++i) edge(i);
    }
  });
}

template <typename T>
void pad_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor g = contiguous(in[0]);
  Tensor& o = out[0];
  zero_fill(o);
  auto pads = a.get_ints("pads");
  const PadMode mode = pad_mode(a);
  int64_t r = o.dim();
  std::vector<int64_t> before(r, 0);
  for (size_t i = 0; i < pads.size() / 2; ++i) before[r - 1 - i] = pads[2 * i];
  const T* src = g.data<T>();
  T* dst = o.data<T>();
  Strides os = contiguous_strides(o.shape());
  // Serial: reflected, replicated and wrapped positions accumulate into the same input element.
  for (int64_t lin = 0; lin < g.numel(); ++lin) {
    int64_t rem = lin, off = 0;
    bool inside = true;
    for (int64_t d = r - 1; d >= 0; --d) {
      int64_t i = rem % g.shape()[d];
      rem /= g.shape()[d];
      int64_t s = pad_source(i, before[d], o.shape()[d], mode);
      if (s < 0) inside = false;
      else off += s * os[d];
    }
    if (inside) dst[off] = static_cast<T>(static_cast<compute_t<T>>(dst[off]) + static_cast<compute_t<T>>(src[lin]));
  }
}

template <typename T, bool kLower>
void tri_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[0]);
  Tensor& o = out[0];
  int64_t k = a.get_int("diagonal", 0);
  int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
  const T* src = x.data<T>();
  T* dst = o.data<T>();
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t at = (m * rows + i) * cols + j;
        bool keep = kLower ? (j - i <= k) : (j - i >= k);
        dst[at] = keep ? src[at] : T(0);
      }
}

// The lines of a cumulative op along `axis`: f(line(p)) for every line,
// where line(p) is the element offset of the p-th element in scan order
// (from the end when reversed).
template <typename F>
void for_each_scan_line(const Shape& shape, const Attrs& a, F&& f) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t ax = normalize_axis(a.get_int("axis"), rank);
  const bool reverse = a.get_bool("reverse", false);
  const int64_t n = rank == 0 ? 1 : shape[ax];
  int64_t inner = 1;
  for (int64_t d = ax + 1; d < rank; ++d) inner *= shape[d];
  const int64_t outer = n * inner == 0 ? 0 : numel_of(shape) / (n * inner);
  parallel_for(outer * inner, 1024, [&](int64_t b, int64_t e) {
    for (int64_t oi = b; oi < e; ++oi) {
      const int64_t base = (oi / inner) * n * inner + oi % inner;
      f(n, [=](int64_t p) { return base + (reverse ? n - 1 - p : p) * inner; });
    }
  });
}

template <typename T, bool kProduct>
void scan_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[0]);
  const T* src = x.data<T>();
  T* dst = out[0].data<T>();
  for_each_scan_line(x.shape(), a, [&](int64_t n, auto at) {
    compute_t<T> acc = kProduct ? 1 : 0;
    for (int64_t p = 0; p < n; ++p) {
      const compute_t<T> v = static_cast<compute_t<T>>(src[at(p)]);
      acc = kProduct ? acc * v : acc + v;
      dst[at(p)] = static_cast<T>(acc);
    }
  });
}
template <typename T>
void cumsum_kernel(const Ins& in, Outs& out, const Attrs& a) { scan_kernel<T, false>(in, out, a); }
template <typename T>
void cumprod_kernel(const Ins& in, Outs& out, const Attrs& a) { scan_kernel<T, true>(in, out, a); }

// d/dx_k of sum_j g_j y_j with y_j = x_0 ... x_j (in scan order) is
// (x_0 ... x_{k-1}) S_k, where S_k = g_k + x_{k+1} S_{k+1}: exact with zeros
// in x, unlike dividing y by x.
template <typename T>
void cumprod_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor g = contiguous(in[0]), x = contiguous(in[1]);
  const T* gs = g.data<T>();
  const T* xs = x.data<T>();
  T* dst = out[0].data<T>();
  for_each_scan_line(x.shape(), a, [&](int64_t n, auto at) {
    compute_t<T> s = 0;
    for (int64_t p = n - 1; p >= 0; --p) {  // dst holds S_k for now
      s = static_cast<compute_t<T>>(gs[at(p)]) + (p + 1 < n ? static_cast<compute_t<T>>(xs[at(p + 1)]) * s : 0);
      dst[at(p)] = static_cast<T>(s);
    }
    compute_t<T> prefix = 1;
    for (int64_t p = 0; p < n; ++p) {
      const compute_t<T> sk = static_cast<compute_t<T>>(dst[at(p)]);
      dst[at(p)] = static_cast<T>(prefix * sk);
      prefix *= static_cast<compute_t<T>>(xs[at(p)]);
    }
  });
}

template <typename T>
void tril_kernel(const Ins& in, Outs& out, const Attrs& a) { tri_kernel<T, true>(in, out, a); }
template <typename T>
void triu_kernel(const Ins& in, Outs& out, const Attrs& a) { tri_kernel<T, false>(in, out, a); }
template <typename T>
void concat_t(const Ins& in, Outs& out, const Attrs& a) { concat_kernel(in, out, a); }
template <typename T>
void slice_backward_t(const Ins& in, Outs& out, const Attrs& a) { slice_backward_kernel(in, out, a); }
template <typename T>
void view_t(const Ins& in, Outs& out, const Attrs& a) { view_kernel(in, out, a); }
template <typename T>
void permute_t(const Ins& in, Outs& out, const Attrs& a) { permute_kernel(in, out, a); }
template <typename T>
void slice_t(const Ins& in, Outs& out, const Attrs& a) { slice_kernel(in, out, a); }
template <typename T>
void expand_t(const Ins& in, Outs& out, const Attrs& a) { expand_kernel(in, out, a); }
template <typename T>
void split_t(const Ins& in, Outs& out, const Attrs& a) { split_kernel(in, out, a); }

}  // namespace

KILN_CPU_ALL("view", view_t);
KILN_CPU_ALL("permute", permute_t);
KILN_CPU_ALL("slice", slice_t);
KILN_CPU_ALL("expand", expand_t);
KILN_CPU_ALL("split", split_t);
KILN_CPU_FLOAT("slice_backward", slice_backward_t);
KILN_CPU_ALL("concat", concat_t);
KILN_CPU_ALL("pad", pad_kernel);
KILN_CPU_FLOAT("pad_backward", pad_backward_kernel);
KILN_CPU_ALL("tril", tril_kernel);
KILN_CPU_ALL("triu", triu_kernel);
KILN_CPU_NUMERIC("cumsum", cumsum_kernel);
KILN_CPU_NUMERIC("cumprod", cumprod_kernel);
KILN_CPU_FLOAT("cumprod_backward", cumprod_backward_kernel);

}  // namespace cpu
}  // namespace kiln

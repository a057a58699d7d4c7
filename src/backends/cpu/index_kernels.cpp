// CPU kernels of the indexing ops. Every index is bounds-checked: a bad index
// is a user error, reported with its value and the valid range.
#include <cstring>

#include "backends/cpu/kernel_helpers.h"

namespace kiln::cpu {
namespace {

std::vector<int64_t> indices_of(const Tensor& t) { return t.to_vector<int64_t>(); }

int64_t checked(int64_t i, int64_t n, const char* what) {
  KILN_CHECK(i >= -n && i < n, what, " ", i, " is out of range for size ", n, " (valid: ", -n, "..", n - 1, ")");
  return i < 0 ? i + n : i;
}

template <typename T>
void embedding_kernel(const Ins& in, Outs& out, const Attrs&) {
  Tensor w = contiguous(in[0]);
  auto idx = indices_of(in[1]);
  int64_t rows = w.shape()[0], dim = w.shape()[1];
  const T* pw = w.data<T>();
  T* py = out[0].data<T>();
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t r = checked(idx[i], rows, "embedding index");
    std::memcpy(py + i * dim, pw + r * dim, sizeof(T) * dim);
  }
}

template <typename T>
void embedding_backward_kernel(const Ins& in, Outs& out, const Attrs& attrs) {
  Tensor g = contiguous(in[0]);
  auto idx = indices_of(in[1]);
  int64_t rows = out[0].shape()[0], dim = out[0].shape()[1];
  const int64_t padding = attrs.get_int("padding_idx", -1);
  T* po = out[0].data<T>();
  std::fill(po, po + out[0].numel(), T(0));
  const T* pg = g.data<T>();
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t r = checked(idx[i], rows, "embedding index");
    if (r == padding) continue;
    for (int64_t k = 0; k < dim; ++k)
      po[r * dim + k] = static_cast<T>(static_cast<compute_t<T>>(po[r * dim + k]) + static_cast<compute_t<T>>(pg[i * dim + k]));
  }
}

// Walks every element of `index` (shape s): calls fn(position in index, position in x with the axis replaced).
template <typename F>
void for_index(const Shape& s, const Strides& x_strides, int64_t ax, const std::vector<int64_t>& idx, int64_t axis_size,
               F fn) {
  int64_t n = numel_of(s);
  for (int64_t lin = 0; lin < n; ++lin) {
    int64_t rem = lin, off = 0;
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      int64_t i = rem % s[d];
      rem /= s[d];
      if (d != ax) off += i * x_strides[d];
    }
    off += checked(idx[lin], axis_size, "index") * x_strides[ax];
    fn(lin, off);
  }
}

template <typename T>
void gather_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]);
  int64_t ax = normalize_axis(a.get_int("axis"), x.dim());
  auto idx = indices_of(in[1]);
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  for_index(in[1].shape(), x.strides(), ax, idx, x.shape()[ax], [&](int64_t i, int64_t off) { py[i] = px[off]; });
}

template <typename T>
void index_select_kernel(const Ins& in, Outs& out, const Attrs& a) {
  Tensor x = contiguous(in[0]);
  int64_t ax = normalize_axis(a.get_int("axis"), x.dim());
  auto idx = indices_of(in[1]);
  int64_t outer = 1, inner = 1, n = x.shape()[ax];
  for (int64_t d = 0; d < ax; ++d) outer *= x.shape()[d];
  for (int64_t d = ax + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  const T* px = x.data<T>();
  T* py = out[0].data<T>();
  int64_t m = static_cast<int64_t>(idx.size());
  for (int64_t k = 0; k < m; ++k) checked(idx[k], n, "index");
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < m; ++k) {
      int64_t r = idx[k] < 0 ? idx[k] + n : idx[k];
      std::memcpy(py + (o * m + k) * inner, px + (o * n + r) * inner, sizeof(T) * inner);
    }
}

// y = x with src combined in at index along the axis: y[.., index[i], ..] =
// combine(y[.., index[i], ..], src[i]) for every element i of index (src is
// read at the index element's own position).
template <typename T, typename Combine>
void scatter_into(const Ins& in, Outs& out, const Attrs& a, Combine combine) {
  using C = compute_t<T>;
  Tensor& y = out[0];
  strided_copy(in[0], y);
  const Tensor src = contiguous(in[2]);
  const int64_t ax = normalize_axis(a.get_int("axis"), y.dim());
  const auto idx = indices_of(in[1]);
  const T* ps = src.data<T>();
  T* py = y.data<T>();
  const Strides ss = src.strides();
  const Shape& is = in[1].shape();
  for_index(is, y.strides(), ax, idx, y.shape()[ax], [&](int64_t i, int64_t off) {
    int64_t rem = i, soff = 0;
    for (int64_t d = static_cast<int64_t>(is.size()) - 1; d >= 0; --d) {
      soff += (rem % is[d]) * ss[d];
      rem /= is[d];
    }
    py[off] = static_cast<T>(combine(static_cast<C>(py[off]), static_cast<C>(ps[soff])));
  });
}

template <typename T>
void scatter_add_kernel(const Ins& in, Outs& out, const Attrs& a) {
  scatter_into<T>(in, out, a, [](auto cur, auto v) { return cur + v; });
}

// ONNX ScatterElements' mul, max and min: x's values take part; a NaN wins,
// as in maximum and minimum.
template <typename T>
void scatter_reduce_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const std::string reduce = a.get_string("reduce", "prod");
  if (reduce == "prod")
    scatter_into<T>(in, out, a, [](auto cur, auto v) { return cur * v; });
  else if (reduce == "amax")
    scatter_into<T>(in, out, a, [](auto cur, auto v) { return (v > cur || v != v) ? v : cur; });
  else
    scatter_into<T>(in, out, a, [](auto cur, auto v) { return (v < cur || v != v) ? v : cur; });
}

template <typename T>
void one_hot_kernel(const Ins& in, Outs& out, const Attrs& a) {
  auto idx = indices_of(in[0]);
  int64_t n = a.get_int("num_classes");
  int64_t* py = out[0].data<int64_t>();
  std::fill(py, py + out[0].numel(), int64_t{0});
  for (size_t i = 0; i < idx.size(); ++i) {
    KILN_CHECK(idx[i] >= 0 && idx[i] < n, "class index ", idx[i], " is out of range for num_classes=", n);
    py[i * n + idx[i]] = 1;
  }
}

}  // namespace

KILN_CPU_ALL("embedding", embedding_kernel);
KILN_CPU_FLOAT("embedding_backward", embedding_backward_kernel);
KILN_CPU_ALL("gather", gather_kernel);
KILN_CPU_ALL("index_select", index_select_kernel);
KILN_CPU_NUMERIC("scatter_add", scatter_add_kernel);
KILN_CPU_NUMERIC("scatter_reduce", scatter_reduce_kernel);
KILN_REGISTER_KERNEL("one_hot", CPU, one_hot_kernel<int64_t>, DType::Int64);
KILN_REGISTER_KERNEL("one_hot", CPU, one_hot_kernel<int32_t>, DType::Int32);

}  // namespace kiln::cpu

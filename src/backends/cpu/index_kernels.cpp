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

// Walks every element of `index` (shape s), in order: calls fn(position in
// index, position in x with the axis replaced). The indices are checked and
// made non-negative first; the position is stepped a row at a time, not
// worked out per element (a [1, 2, 64, 64] gather took 146 us that way).
template <typename F>
void for_index(const Shape& s, const Strides& x_strides, int64_t ax, std::vector<int64_t>& idx, int64_t axis_size,
               F fn) {
  const int64_t n = numel_of(s);
  if (n == 0) return;
  for (int64_t& i : idx) i = checked(i, axis_size, "index");
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank == 0) return fn(0, idx[0] * x_strides[ax]);
  const int64_t last = rank - 1, cols = s[last], col_step = last == ax ? 0 : x_strides[last], along = x_strides[ax];
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  int64_t base = 0;  // the row's first position, the axis left out
  for (int64_t row = 0; row < n; row += cols) {
    for (int64_t j = 0; j < cols; ++j) fn(row + j, base + j * col_step + idx[row + j] * along);
    for (int64_t d = last - 1; d >= 0; --d) {  // the next row
      if (d != ax) base += x_strides[d];
      if (++at[d] < s[d]) break;
      if (d != ax) base -= x_strides[d] * s[d];
      at[d] = 0;
    }
  }
}

// y[i] = x at i with its axis coordinate replaced by index[i] (int64 or
// int32). The index is read through its strides (an expanded row of
// positions is not copied out), a row at a time.
template <typename T, typename I>
void gather_rows(const Tensor& x, int64_t ax, const Tensor& index, T* py) {
  const Shape& s = index.shape();
  const int64_t n = numel_of(s), axis_size = x.shape()[ax];
  if (n == 0) return;
  const T* px = x.data<T>();
  const I* pi = index.data<I>();
  const Strides& xs = x.strides();
  const Strides& is = index.strides();
  auto position = [&](int64_t p) {  // checked, negative counted from the end
    return static_cast<uint64_t>(p) < static_cast<uint64_t>(axis_size) ? p : checked(p, axis_size, "index");
  };
  const int64_t rank = static_cast<int64_t>(s.size());
  if (rank == 0) {
    py[0] = px[position(pi[0]) * xs[ax]];
    return;
  }
  const int64_t last = rank - 1, cols = s[last], col_step = last == ax ? 0 : xs[last], along = xs[ax];
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  int64_t base = 0, index_base = 0;  // the row's first positions in x (the axis left out) and in index
  for (int64_t row = 0; row < n; row += cols) {
    for (int64_t j = 0; j < cols; ++j)
      py[row + j] = px[base + j * col_step + position(pi[index_base + j * is[last]]) * along];
    for (int64_t d = last - 1; d >= 0; --d) {  // the next row
      if (d != ax) base += xs[d];
      index_base += is[d];
      if (++at[d] < s[d]) break;
      if (d != ax) base -= xs[d] * s[d];
      index_base -= is[d] * s[d];
      at[d] = 0;
    }
  }
}

template <typename T>
void gather_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Tensor x = contiguous(in[0]);
  const int64_t ax = normalize_axis(a.get_int("axis"), x.dim());
  if (in[1].dtype() == DType::Int32) return gather_rows<T, int32_t>(x, ax, in[1], out[0].data<T>());
  gather_rows<T, int64_t>(x, ax, in[1], out[0].data<T>());
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
  auto idx = indices_of(in[1]);
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

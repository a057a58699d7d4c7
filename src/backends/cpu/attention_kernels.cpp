// CPU kernels of attention and its gradient. The forward, per (batch, head)
// and block of query rows: the scores of the block (one GEMM), the mask and
// causal cut, a softmax per row and the weighted values (a second GEMM);
// float32 heads of whole 16-column panels on Kiln's register tiles
// (attention_tiles.cpp). The scores live in a per-thread buffer of block x
// S, so the [L, S] matrix is never written unless the weights are asked for
// (save_weights), and then it is written once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backends/cpu/attention_forward.h"
#include "backends/cpu/attention_tiles.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel_helpers.h"
#include "backends/cpu/softmax_row.h"

namespace kiln::cpu {
namespace {

// Query rows per work item: all of a head's when there are heads enough for
// every thread, else as few as keep the threads busy (their scores stay in
// L2 either way at these sizes), at least 16.
// A causal item takes at most 32 rows, so that it can stop at the last key
// its rows see: at 128 positions the items then do about 60% of the work
// of whole rows.
int64_t rows_per_item(int64_t batch, int64_t rows, bool causal) {
  const int64_t wanted = 4 * static_cast<int64_t>(get_num_threads());
  const int64_t most = causal ? std::min<int64_t>(rows, 32) : rows;
  if (batch >= wanted) return most;
  const int64_t blocks = (wanted + batch - 1) / batch;
  return std::min(most, std::max<int64_t>(16, (rows + blocks - 1) / blocks));
}

// The matrices of t: the product of its leading (batch, head) axes.
int64_t leading(const Tensor& t) {
  int64_t n = 1;
  for (int64_t ax = 0; ax + 2 < t.dim(); ++ax) n *= t.shape()[ax];
  return n;
}

// The element offset of each [rows, cols] matrix of t, its leading axes
// unravelled (broadcast axes have stride 0).
std::vector<int64_t> matrix_offsets(const Tensor& t) {
  const int64_t rank = t.dim(), matrices = leading(t);
  std::vector<int64_t> offsets(static_cast<size_t>(matrices));
  for (int64_t b = 0; b < matrices; ++b) {
    int64_t off = 0, rest = b;
    for (int64_t ax = rank - 3; ax >= 0; --ax) {
      off += rest % t.shape()[ax] * t.strides()[ax];
      rest /= t.shape()[ax];
    }
    offsets[static_cast<size_t>(b)] = off;
  }
  return offsets;
}

// An operand whose rows are contiguous as it stands (a head of a fused QKV
// projection's output, [L, H, D] permuted to [H, L, D]), else a contiguous
// copy; and the offset of each [rows, D] matrix and the stride between rows.
struct Operand {
  Tensor t;
  std::vector<int64_t> offsets;
  int64_t row_stride;
};
Operand operand(const Tensor& x) {
  const int64_t rank = x.dim();
  const auto& st = x.strides();
  const bool rows_as_they_stand = (st[rank - 1] == 1 || x.size(-1) == 1) && (x.size(-2) == 1 || st[rank - 2] >= x.size(-1));
  Operand o{rows_as_they_stand ? x : contiguous(x), {}, 0};
  const Shape& shape = o.t.shape();
  o.row_stride = shape[rank - 2] == 1 ? shape[rank - 1] : o.t.strides()[rank - 2];
  o.offsets = matrix_offsets(o.t);
  return o;
}

// Softmax of each score row in place over the keys it sees (a multiple of
// 8 past the causal cut, the keys between masked), the mask added first;
// zeros after, up to `zero_to`. Query row i of the block is row r0 + i.
template <typename T>
void softmax_rows(T* p, int64_t ld, int64_t rows, int64_t r0, int64_t s, int64_t zero_to, bool causal, const T* pm,
                  int64_t mask_row0, int64_t mask_row_stride, int64_t mask_col_stride) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = p + i * ld;
    // Key j sees query i when j <= i. The softmax runs to a multiple of 8
    // past that, the keys between masked: its sums then take the same
    // lanes as over the whole row, so a causal mask given as a mask gives
    // the same bits as the causal flag.
    const int64_t seen = causal ? std::min(s, r0 + i + 1) : s;
    const int64_t visible = std::min(s, (seen + 7) / 8 * 8);
    if (pm) {
      const int64_t off = mask_row0 + (r0 + i) * mask_row_stride;
      for (int64_t j = 0; j < visible; ++j) row[j] += pm[off + j * mask_col_stride];
    }
    std::fill(row + seen, row + visible, -std::numeric_limits<T>::infinity());
    if (softmax_row<T, false>(row, row, visible) == -std::numeric_limits<T>::infinity()) {
      std::fill(row, row + zero_to, T(0));  // nothing to attend to: zeros, not NaN
      continue;
    }
    std::fill(row + visible, row + zero_to, T(0));
  }
}

template <typename T>
void attention(const Ins& in, Outs& out, const Attrs& a, bool heads_interleaved) {
  const Operand oq = operand(in[0]), ok = operand(in[1]), ov = operand(in[2]);
  const Tensor &q = oq.t, &k = ok.t, &v = ov.t;
  const int64_t r = q.dim(), l = q.size(-2), d = q.size(-1), s = k.size(-2), dv = v.size(-1);
  const int64_t batch = leading(q);
  const double given = a.get_float("scale", 0.0);
  const T scale = static_cast<T>(given > 0 ? given : 1.0 / std::sqrt(static_cast<double>(d)));
  const bool causal = a.get_bool("causal", false);
  Tensor& y = out[0];
  T* weights = out[1].numel() > 0 ? out[1].data<T>() : nullptr;
  // The mask as a view of the scores' shape (broadcast axes with stride 0).
  Tensor mask;
  if (in.size() > 3 && in[3].defined()) {
    Shape scores = q.shape();
    scores.back() = s;
    mask = expanded(in[3], scores);
  }
  const std::vector<int64_t> mask_offsets = mask.defined() ? matrix_offsets(mask) : std::vector<int64_t>{};
  const T* pm = mask.defined() ? mask.data<T>() : nullptr;
  const T *pq = q.data<T>(), *pk = k.data<T>(), *pv = v.data<T>();
  T* py = y.data<T>();
  // Where matrix b's rows go: [.., H, L, Dv], or [.., L, H, Dv] with the heads interleaved.
  const int64_t heads = heads_interleaved ? q.size(-3) : 1, y_stride = heads * dv;
  auto y_rows = [&](int64_t b, int64_t r0) {
    return py + ((b / heads * l + r0) * heads + b % heads) * dv;
  };
  const int64_t block = rows_per_item(batch, l, causal), blocks = (l + block - 1) / block;
  const int64_t mask_row_stride = mask.defined() ? mask.strides()[r - 2] : 0;
  const int64_t mask_col_stride = mask.defined() ? mask.strides()[r - 1] : 0;
  // Kept weights are the tiles' scores where their rows hold whole panels.
  const bool tiled =
      std::is_same_v<T, float> && dv % kAttentionTileCols == 0 && (!weights || s % kAttentionTileCols == 0);
  parallel_for(batch * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> scratch(static_cast<size_t>(weights || tiled ? 0 : block * s));
    // Kept by the thread from call to call: a vector made here would be
    // zeroed at every call only to be overwritten (a decoded token's keys
    // and values, a tenth of its attention's time).
    thread_local std::vector<float> tiles, panels;
    int64_t packed = -1;  // the head whose panels these are (a head's items come in turn)
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / blocks, r0 = item % blocks * block, rows = std::min(block, l - r0);
      // The keys any row of the block sees (rounded up as the softmax rounds
      // below); past them the weights are zero, so both products stop there.
      const int64_t reach = causal ? std::min(s, (r0 + rows + 7) / 8 * 8) : s;
      const int64_t mask_row0 = mask.defined() ? mask_offsets[b] : 0;
      if constexpr (std::is_same_v<T, float>) {
        if (tiled) {
          const AttentionHead head{pk + ok.offsets[b], pv + ov.offsets[b], ok.row_stride, ov.row_stride, s, d, dv};
          if (packed != b) pack_attention_head(head, panels), packed = b;
          const AttentionTile t{pq + oq.offsets[b] + r0 * oq.row_stride,
                                oq.row_stride,
                                rows,
                                reach,
                                scale,
                                weights ? weights + (b * l + r0) * s : nullptr,
                                s};
          attention_by_tiles(
              head, panels, t, tiles,
              [&](float* p, int64_t ld) {
                softmax_rows(p, ld, rows, r0, s, weights ? s : reach, causal, pm, mask_row0, mask_row_stride,
                             mask_col_stride);
              },
              y_rows(b, r0), y_stride);
          continue;
        }
      }
      T* p = weights ? weights + (b * l + r0) * s : scratch.data();
      gemm<T>(false, true, rows, reach, d, scale, pq + oq.offsets[b] + r0 * oq.row_stride, oq.row_stride,
              pk + ok.offsets[b], ok.row_stride, T(0), p, s);
      softmax_rows(p, s, rows, r0, s, s, causal, pm, mask_row0, mask_row_stride, mask_col_stride);
      gemm<T>(false, false, rows, dv, reach, T(1), p, s, pv + ov.offsets[b], ov.row_stride, T(0), y_rows(b, r0),
              y_stride);
    }
  });
}

template <typename T>
void attention_kernel(const Ins& in, Outs& out, const Attrs& a) {
  attention<T>(in, out, a, false);
}

// The gradients of q, k and v (attention_backward), one (batch, head) per
// work item: float32 heads whose widths are whole tile panels on the tiles
// (attention_tiles.h), the rest as four GEMMs around the rows of ds.
template <typename T>
void attention_backward_kernel(const Ins& in, Outs& out, const Attrs& a) {
  const Operand og = operand(in[0]), oq = operand(in[1]), ok = operand(in[2]), ov = operand(in[3]);
  const Tensor p = contiguous(in[4]);
  const Tensor& q = oq.t;
  const int64_t l = q.size(-2), d = q.size(-1), s = ok.t.size(-2), dv = ov.t.size(-1);
  const int64_t batch = leading(q);
  const T scale = static_cast<T>(a.get_float("scale"));
  const bool causal = a.get_bool("causal", false);
  const T *pg = og.t.data<T>(), *pq = q.data<T>(), *pk = ok.t.data<T>(), *pv = ov.t.data<T>(), *pp = p.data<T>();
  T *gq = out[0].data<T>(), *gk = out[1].data<T>(), *gv = out[2].data<T>();
  const bool tiled = std::is_same_v<T, float> && d % kAttentionTileCols == 0 && dv % kAttentionTileCols == 0;
  parallel_for(batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> tiles;
    std::vector<T> ds(static_cast<size_t>(tiled ? 0 : l * s));
    for (int64_t b = begin; b < end; ++b) {
      const T *g = pg + og.offsets[b], *qb = pq + oq.offsets[b], *kb = pk + ok.offsets[b], *vb = pv + ov.offsets[b];
      const T* pb = pp + b * l * s;
      T *gqb = gq + b * l * d, *gkb = gk + b * s * d, *gvb = gv + b * s * dv;
      if constexpr (std::is_same_v<T, float>) {
        if (tiled) {
          attention_backward_by_tiles({g, qb, kb, vb, pb, og.row_stride, oq.row_stride, ok.row_stride, ov.row_stride, l,
                                       s, d, dv, scale, causal},
                                      tiles, gqb, gkb, gvb);
          continue;
        }
      }
      gemm<T>(false, true, l, s, dv, T(1), g, og.row_stride, vb, ov.row_stride, T(0), ds.data(), s);  // dp
      for (int64_t i = 0; i < l; ++i) softmax_gradient_row(ds.data() + i * s, pb + i * s, s, scale);
      gemm<T>(false, false, l, d, s, T(1), ds.data(), s, kb, ok.row_stride, T(0), gqb, d);
      gemm<T>(true, false, s, d, l, T(1), ds.data(), s, qb, oq.row_stride, T(0), gkb, d);
      gemm<T>(true, false, s, dv, l, T(1), pb, s, g, og.row_stride, T(0), gvb, dv);
    }
  });
}

}  // namespace

void attention_forward(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& a,
                       bool heads_interleaved) {
  KILN_CHECK(!heads_interleaved || (in[0].dim() >= 3 && out[1].numel() == 0),
             "attention with its heads interleaved needs heads (q of rank 3 or more) and no weights kept");
  if (in[0].dtype() == DType::Float64)
    attention<double>(in, out, a, heads_interleaved);
  else
    attention<float>(in, out, a, heads_interleaved);
}

KILN_CPU_F32_F64("attention", attention_kernel);
KILN_CPU_F32_F64("attention_backward", attention_backward_kernel);

}  // namespace kiln::cpu

#include "backends/cpu/winograd_conv.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/gemm_tile.h"
#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu {
namespace {

// W floats as one value: the transforms run on a whole channel block where
// the CPU's vectors are that wide (16 with AVX-512), else on 8 channels.
// (An alias template with the size as a parameter would lose the attribute.)
template <int W>
struct LanesOf;
template <>
struct LanesOf<8> {
  using type = float __attribute__((vector_size(32)));
};
template <>
struct LanesOf<16> {
  using type = float __attribute__((vector_size(64)));
};
template <int W>
using Lanes = typename LanesOf<W>::type;
template <int W>
Lanes<W> load(const float* p) {
  Lanes<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <int W>
void store(float* p, Lanes<W> v) {
  std::memcpy(p, &v, sizeof v);
}

// SiLU on W lanes (gemm_tile.h's, on a whole register).
template <int W>
Lanes<W> silu(Lanes<W> v) {
#if defined(__AVX512F__)
  if constexpr (W == 16) {
    return reinterpret_cast<Lanes<W>>(gemm::silu16(reinterpret_cast<__m512>(v)));
  } else {
    const __m512 wide = _mm512_castps256_ps512(reinterpret_cast<__m256>(v));  // (the upper half unused)
    return reinterpret_cast<Lanes<W>>(_mm512_castps512_ps256(gemm::silu16(wide)));
  }
#else
  KILN_FAIL("a SiLU in Winograd's epilogue needs AVX-512");
  return v;
#endif
}

// Where W channels starting at channel group g (channels W g .. W g + W - 1)
// sit in a blocked tensor [n, c/block, h, w, block], at (n, ., y, x).
template <int W>
struct Blocked {
  const float* base;
  int64_t c, h, w;
  int block;
  int64_t at(int64_t n, int64_t g, int64_t y, int64_t x) const {
    const int64_t ch = g * W;
    return (((n * (c / block) + ch / block) * h + y) * w + x) * block + ch % block;
  }
};

// The 1-D transforms of F(M, 3): `in` is B^T (A = M + 2 input values to A),
// `out` is A^T (A values to M outputs), `weight` is G (3 taps to A). Applied
// along columns and then rows, they make the 2-D ones.
template <int M>
struct Transforms;

template <>
struct Transforms<2> {
  static constexpr int A = 4;
  template <typename vf>
  static void in(const vf d[4], vf r[4]) {
    r[0] = d[0] - d[2];
    r[1] = d[1] + d[2];
    r[2] = d[2] - d[1];
    r[3] = d[1] - d[3];
  }
  template <typename vf>
  static void out(const vf m[4], vf r[2]) {
    r[0] = m[0] + m[1] + m[2];
    r[1] = m[1] - m[2] - m[3];
  }
  static void weight(const float g[3], float r[4]) {
    r[0] = g[0];
    r[1] = 0.5f * (g[0] + g[1] + g[2]);
    r[2] = 0.5f * (g[0] - g[1] + g[2]);
    r[3] = g[2];
  }
};

// Points 0, -1, 1, -2, 2 and infinity (Lavin and Gray).
template <>
struct Transforms<4> {
  static constexpr int A = 6;
  template <typename vf>
  static void in(const vf d[6], vf r[6]) {
    const vf two = vf{} + 2.0f, four = vf{} + 4.0f, five = vf{} + 5.0f;
    r[0] = four * d[0] - five * d[2] + d[4];
    r[1] = d[3] + d[4] - four * (d[1] + d[2]);
    r[2] = four * (d[1] - d[2]) + d[4] - d[3];
    r[3] = two * (d[3] - d[1]) + d[4] - d[2];
    r[4] = two * (d[1] - d[3]) + d[4] - d[2];
    r[5] = four * d[1] - five * d[3] + d[5];
  }
  template <typename vf>
  static void out(const vf m[6], vf r[4]) {
    const vf two = vf{} + 2.0f, four = vf{} + 4.0f, eight = vf{} + 8.0f;
    const vf sum12 = m[1] + m[2], diff12 = m[1] - m[2], sum34 = m[3] + m[4], diff34 = m[3] - m[4];
    r[0] = m[0] + sum12 + sum34;
    r[1] = diff12 + two * diff34;
    r[2] = sum12 + four * sum34;
    r[3] = diff12 + eight * diff34 + m[5];
  }
  static void weight(const float g[3], float r[6]) {
    r[0] = g[0] / 4;
    r[1] = -(g[0] + g[1] + g[2]) / 6;
    r[2] = -(g[0] - g[1] + g[2]) / 6;
    r[3] = g[0] / 24 + g[1] / 12 + g[2] / 6;
    r[4] = g[0] / 24 - g[1] / 12 + g[2] / 6;
    r[5] = g[2];
  }
};

struct Geometry {
  int64_t tiles_h, tiles_w, tiles;  // tiles per image along h and w; in all
  int64_t groups_in, groups_out;    // channels / W
};

template <int M, int W>
Geometry geometry_of(const onednn::ConvShape& s) {
  Geometry g;
  g.tiles_h = (s.oh + M - 1) / M;
  g.tiles_w = (s.ow + M - 1) / M;
  g.tiles = s.n * g.tiles_h * g.tiles_w;
  g.groups_in = s.c / W;
  g.groups_out = s.o / W;
  return g;
}

// V = B^T d B: v[t][tile][c], t the A*A positions, stride_t floats apart.
// A chunk's tiles start at `first`; this transforms its tiles [lo, hi)
// (chunk positions).
template <int M, int W>
void transform_input(const onednn::ConvShape& s, const Geometry& geo, const Blocked<W>& x, int64_t first,
                     int64_t lo, int64_t hi, float* v, int64_t stride_t) {
  using vf = Lanes<W>;
  constexpr int A = Transforms<M>::A;
  const int64_t per_image = geo.tiles_h * geo.tiles_w;
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t tile = first + i, n = tile / per_image, ty = tile % per_image / geo.tiles_w,
                  tx = tile % geo.tiles_w;
    const int64_t y0 = M * ty - s.ph, x0 = M * tx - s.pw;
    const bool inside = y0 >= 0 && x0 >= 0 && y0 + A <= s.h && x0 + A <= s.w;
    for (int64_t g = 0; g < geo.groups_in; ++g) {
      vf d[A][A];
      for (int r = 0; r < A; ++r)
        for (int c = 0; c < A; ++c) {
          const int64_t iy = y0 + r, ix = x0 + c;
          const bool in_image = inside || (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w);
          d[r][c] = in_image ? load<W>(x.base + x.at(n, g, iy, ix)) : vf{};
        }
      vf t[A][A];  // B^T d, column by column
      for (int c = 0; c < A; ++c) {
        vf column[A], transformed[A];
        for (int r = 0; r < A; ++r) column[r] = d[r][c];
        Transforms<M>::in(column, transformed);
        for (int r = 0; r < A; ++r) t[r][c] = transformed[r];
      }
      float* out = v + i * s.c + g * W;
      for (int r = 0; r < A; ++r) {  // (B^T d) B, row by row
        vf row[A];
        Transforms<M>::in(t[r], row);
        for (int c = 0; c < A; ++c) store<W>(out + (r * A + c) * stride_t, row[c]);
      }
    }
  }
}

// Y = A^T M A for a chunk's tiles [lo, hi) (m's matrices stride_t floats
// apart), with bias, residual and ReLU;
// or the maxima of each tile's 2x2 windows (M is even, so tiles hold whole
// windows; a window past the floor of the output is not written).
template <int M, int W>
void transform_output(const onednn::ConvShape& s, const Geometry& geo, const float* m, int64_t stride_t, int64_t first,
                      int64_t lo, int64_t hi, float* y_base, int block, const WinogradEpilogue& e) {
  using vf = Lanes<W>;
  constexpr int A = Transforms<M>::A;
  const int64_t per_image = geo.tiles_h * geo.tiles_w;
  const Blocked<W> y = e.max_pool ? Blocked<W>{y_base, s.o, s.oh / 2, s.ow / 2, block}
                                  : Blocked<W>{y_base, s.o, s.oh, s.ow, block};
  auto larger = [](vf a, vf b) -> vf { return (b > a) | (b != b) ? b : a; };  // NaN wins
  for (int64_t i = lo; i < hi; ++i) {
    const int64_t tile = first + i, n = tile / per_image, ty = tile % per_image / geo.tiles_w,
                  tx = tile % geo.tiles_w;
    for (int64_t g = 0; g < geo.groups_out; ++g) {
      const float* in = m + i * s.o + g * W;
      vf t[M][A];  // A^T m, column by column
      for (int c = 0; c < A; ++c) {
        vf column[A], transformed[M];
        for (int r = 0; r < A; ++r) column[r] = load<W>(in + (r * A + c) * stride_t);
        Transforms<M>::out(column, transformed);
        for (int r = 0; r < M; ++r) t[r][c] = transformed[r];
      }
      const vf b = e.bias ? load<W>(e.bias + g * W) : vf{};
      auto finish = [&](vf v, float* p) {
        v += b;
        if (e.residual) v += load<W>(p);
        if (e.relu) v = v < vf{} ? vf{} : v;  // NaN passes
        if (e.swish) v = silu<W>(v);
        store<W>(p, v);
      };
      if (e.max_pool) {  // (the bias after the maximum: adding it is monotonic, so the result is the same)
        vf out[M][M];
        for (int a = 0; a < M; ++a) Transforms<M>::out(t[a], out[a]);
        for (int a = 0; a < M; a += 2)
          for (int c = 0; c < M; c += 2) {
            const int64_t py = (M * ty + a) / 2, px = (M * tx + c) / 2;
            if (py < y.h && px < y.w)
              finish(larger(larger(out[a][c], out[a][c + 1]), larger(out[a + 1][c], out[a + 1][c + 1])),
                     y_base + y.at(n, g, py, px));
          }
        continue;
      }
      for (int a = 0; a < M; ++a) {
        vf row[M];
        Transforms<M>::out(t[a], row);
        for (int c = 0; c < M; ++c) {
          const int64_t oy = M * ty + a, ox = M * tx + c;
          if (oy < s.oh && ox < s.ow) finish(row[c], y_base + y.at(n, g, oy, ox));
        }
      }
    }
  }
}

// Each patch position's [c, o] matrix is stored in one of two forms. Below
// 256 x 256 channels, in panels of 16 output channels (for each channel c,
// the panel's 16 values side by side, zeros past o), which Kiln's register
// tiles read (gemm_tile.h): the products are small, and oneDNN's sgemm,
// packing U again on every call, cost more than their arithmetic (a 32 -> 64
// layer at 14x14 ran slower by Winograd than directly). From 256 x 256 the
// matrices are 4 MB and more, read from memory on every call, which sgemm
// streams faster (ResNet-18's 512-channel layers at 7x7 ran slower on the
// tiles): plain row-major.
bool in_panels(const onednn::ConvShape& s) { return s.c * s.o < 256 * 256; }
int64_t panels_of(const onednn::ConvShape& s) { return (s.o + gemm::kCols - 1) / gemm::kCols; }
int64_t columns_of(const onednn::ConvShape& s) { return in_panels(s) ? panels_of(s) * gemm::kCols : s.o; }

template <int M>
void weights(const onednn::ConvShape& s, const float* w, float* u) {
  constexpr int A = Transforms<M>::A;
  const int64_t panel = s.c * gemm::kCols, position = s.c * columns_of(s);
  const bool panels = in_panels(s);
  std::fill(u, u + A * A * position, 0.0f);
  for (int64_t o = 0; o < s.o; ++o)
    for (int64_t c = 0; c < s.c; ++c) {
      const float* g = w + (o * s.c + c) * 9;
      float t[A][3];  // G g, column by column
      for (int j = 0; j < 3; ++j) {
        const float column[3] = {g[j], g[3 + j], g[6 + j]};
        float transformed[A];
        Transforms<M>::weight(column, transformed);
        for (int i = 0; i < A; ++i) t[i][j] = transformed[i];
      }
      for (int i = 0; i < A; ++i) {  // (G g) G^T, row by row
        float row[A];
        Transforms<M>::weight(t[i], row);
        for (int j = 0; j < A; ++j)
          u[(i * A + j) * position + (panels ? o / gemm::kCols * panel + c * gemm::kCols + o % gemm::kCols
                                             : c * s.o + o)] = row[j];
      }
    }
}

// M = V U at patch positions [t_lo, t_hi): [count, c] times [c, o].
void products(const onednn::ConvShape& s, int64_t count, int64_t t_lo, int64_t t_hi, const float* v, int64_t stride_v,
              const float* u, float* m, int64_t stride_m) {
  if (!in_panels(s)) {
    for (int64_t t = t_lo; t < t_hi; ++t) {
      const dnnl_status_t st = dnnl_sgemm('N', 'N', count, s.o, s.c, 1.0f, v + t * stride_v, s.c,
                                          u + t * s.c * s.o, s.o, 0.0f, m + t * stride_m, s.o);
      KILN_CHECK(st == dnnl_success, "oneDNN sgemm failed in a Winograd convolution");
    }
    return;
  }
  const int64_t panels = panels_of(s), panel = s.c * gemm::kCols;
  const gemm::Epilogue plain{nullptr, false, true, false};
  for (int64_t t = t_lo; t < t_hi; ++t) {
    const float *vt = v + t * stride_v, *ut = u + t * panels * panel;
    float* mt = m + t * stride_m;
    // Row `row` of panel q's columns in M (the last panel's second half may not exist).
    auto out = [&](int64_t q, int64_t row) {
      return gemm::Output{mt + row * s.o + q * gemm::kCols, s.o, (q + 1) * gemm::kCols <= s.o ? 8 : 0};
    };
    for (int64_t q = 0; q < panels; q += 2)
      for (int64_t row = 0; row < count; row += gemm::kRows) {
        const int64_t rows = std::min(gemm::kRows, count - row);
        const float* a = vt + row * s.c;
        if (q + 1 < panels)
          gemm::tile2_rows(rows, a, s.c, ut + q * panel, ut + (q + 1) * panel, s.c, out(q, row), out(q + 1, row), plain,
                           plain);
        else
          gemm::tile_rows(rows, a, s.c, ut + q * panel, s.c, out(q, row), plain);
      }
  }
}

template <int M, int W>
void convolve(const onednn::ConvShape& s, int block, const float* x, const float* u, float* y,
              const WinogradEpilogue& e) {
  constexpr int T = Transforms<M>::A * Transforms<M>::A;  // GEMMs per chunk
  const Geometry geo = geometry_of<M, W>(s);
  // Tiles per chunk: each thread transforms a chunk, runs its T GEMMs and
  // transforms it back while it is still in its own cache. Its buffers take
  // 4 T (c + o) bytes per tile. Each chunk's GEMMs read all T c x o
  // transformed weight matrices (and sgemm packs them again), so a chunk
  // needs enough tiles to amortize that: 32 while the weights stay in cache,
  // up to 512 when they are megabytes (512 channels: 16 MB, 1.6x faster at
  // batch 64 than with 32-tile chunks). (With few channels, larger chunks
  // would make the tiny GEMMs faster too, but their buffers count against
  // the peak memory of small networks.)
  int64_t chunk = std::clamp<int64_t>(s.c * s.o / 512, 32, 512);
  int64_t chunks = (geo.tiles + chunk - 1) / chunk;
  if (const int64_t threads = get_num_threads(); chunks >= 2 * threads) {  // about as many tiles for every thread
    chunks = (chunks + threads - 1) / threads * threads;
    chunk = (geo.tiles + chunks - 1) / chunks;
    chunks = (geo.tiles + chunk - 1) / chunk;  // none empty
  }
  const Blocked<W> xb{x, s.c, s.h, s.w, block};
  // The T matrices of a buffer sit one cache line further apart than their
  // size: a tile's T values are T matrices apart, and at a multiple of 4 KB
  // (32 tiles of 32 channels) they all fell in one set of the L1 cache.
  auto padded = [](int64_t floats) { return floats + 16; };
  if (chunks < 2 * get_num_threads()) {
    // Few tiles (deep layers at batch 1): one chunk of them all, each phase
    // spread over the threads, the T GEMMs too.
    const int64_t sv = padded(geo.tiles * s.c), sm = padded(geo.tiles * s.o);
    Tensor v_buffer = Tensor::empty({T * sv}), m_buffer = Tensor::empty({T * sm});
    float *v = v_buffer.data<float>(), *m = m_buffer.data<float>();
    parallel_for(geo.tiles, 1,
                 [&](int64_t lo, int64_t hi) { transform_input<M, W>(s, geo, xb, 0, lo, hi, v, sv); });
    parallel_for(T, 1, [&](int64_t lo, int64_t hi) { products(s, geo.tiles, lo, hi, v, sv, u, m, sm); });
    parallel_for(geo.tiles, 1, [&](int64_t lo, int64_t hi) {
      transform_output<M, W>(s, geo, m, sm, 0, lo, hi, y, block, e);
    });
    return;
  }
  parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    // From Kiln's caching allocator: no page faults or zeroing per call.
    const int64_t sv = padded(chunk * s.c), sm = padded(chunk * s.o);
    Tensor v_buffer = Tensor::empty({T * sv}), m_buffer = Tensor::empty({T * sm});
    float *v = v_buffer.data<float>(), *m = m_buffer.data<float>();
    for (int64_t k = begin; k < end; ++k) {
      const int64_t first = k * chunk, count = std::min(chunk, geo.tiles - first);
      transform_input<M, W>(s, geo, xb, first, 0, count, v, sv);
      products(s, count, 0, T, v, sv, u, m, sm);
      transform_output<M, W>(s, geo, m, sm, first, 0, count, y, block, e);
    }
  });
}

}  // namespace

bool winograd_applies(const onednn::ConvShape& s, int block) {
  return (block == 8 || block == 16) && s.kh == 3 && s.kw == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 &&
         s.groups == 1 && s.ph <= 1 && s.pw <= 1 && s.c % block == 0 && s.o % block == 0 && s.oh >= 1 && s.ow >= 1;
}

int64_t winograd_weights_size(const onednn::ConvShape& s, int tile) {
  return (tile + 2) * (tile + 2) * s.c * columns_of(s);
}

void winograd_weights(const onednn::ConvShape& s, int tile, const float* w, float* u) {
  KILN_CHECK(tile == 2 || tile == 4, "Winograd output tiles are 2x2 or 4x4, not ", tile, "x", tile);
  tile == 2 ? weights<2>(s, w, u) : weights<4>(s, w, u);
}

void winograd_conv(const onednn::ConvShape& s, int tile, int block, const float* x, const float* u, float* y,
                   const WinogradEpilogue& e) {
  KILN_CHECK(tile == 2 || tile == 4, "Winograd output tiles are 2x2 or 4x4, not ", tile, "x", tile);
  KILN_CHECK(!(e.max_pool && e.residual), "a Winograd convolution takes a max pool or a residual, not both");
  // A whole 16-channel block per vector where the CPU has 16-float vectors.
#if defined(__AVX512F__)
  if (block == 16) {
    tile == 2 ? convolve<2, 16>(s, block, x, u, y, e) : convolve<4, 16>(s, block, x, u, y, e);
    return;
  }
#endif
  tile == 2 ? convolve<2, 8>(s, block, x, u, y, e) : convolve<4, 8>(s, block, x, u, y, e);
}

}  // namespace kiln::cpu

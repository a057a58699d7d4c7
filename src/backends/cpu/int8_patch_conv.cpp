#include "backends/cpu/int8_patch_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/error.h"
#include "kiln/parallel.h"
#include "kiln/tensor.h"

namespace kiln::cpu::int8_patch_conv {
namespace {

constexpr int64_t kMostChannels = 4;  // (measured at 1 and 3: stems' few colour or grey channels)
constexpr int64_t kSlack = 64;        // bytes after the padded image: the last run's group reads past it

// The bytes of one kernel row's run: kw * c rounded up to whole groups of 4.
int64_t run_bytes(const ConvShape& s) { return (s.kw * s.c + 3) / 4 * 4; }

// The padded image's rows and columns: what the output's windows reach.
int64_t padded_rows(const ConvShape& s) { return (s.oh - 1) * s.sh + (s.kh - 1) * s.dh + 1; }
int64_t padded_columns(const ConvShape& s) { return (s.ow - 1) * s.sw + s.kw; }

// to[i] = from[i] with its top bit flipped (through locals that cannot
// alias: GCC 12 kept a byte loop over the captured values scalar).
void flip_bytes(const uint8_t* __restrict from, int64_t n, uint8_t* __restrict to) {
  for (int64_t i = 0; i < n; ++i) to[i] = static_cast<uint8_t>(from[i] ^ 0x80u);
}

// The images of x into `to`, padded with the zero point, as uint8 (int8
// read as uint8 + 128: its top bit flipped, and the zero point moved with
// it, which leaves each x - x_zero as it was), in one parallel region (a
// batch of small images took one per image).
void pad_images(const ConvShape& s, const uint8_t* x, bool flip, uint8_t zero, uint8_t* to) {
  const int64_t wp = padded_columns(s), row_bytes = wp * s.c, hp = padded_rows(s);
  // Input columns [first, last) land inside the padded row, from column pw.
  const int64_t first = std::max<int64_t>(0, -s.pw), last = std::min(s.w, wp - s.pw);
  parallel_for(s.n * hp, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t at = lo; at < hi; ++at) {
      uint8_t* row = to + at * row_bytes;
      const int64_t n = at / hp, ih = at % hp - s.ph;
      if (ih < 0 || ih >= s.h || last <= first) {
        std::memset(row, zero, static_cast<size_t>(row_bytes));
        continue;
      }
      const int64_t left = (s.pw + first) * s.c, bytes = (last - first) * s.c;
      std::memset(row, zero, static_cast<size_t>(left));
      const uint8_t* from = x + ((n * s.h + ih) * s.w + first) * s.c;
      if (flip)
        flip_bytes(from, bytes, row + left);
      else
        std::memcpy(row + left, from, static_cast<size_t>(bytes));
      std::memset(row + left + bytes, zero, static_cast<size_t>(row_bytes - left - bytes));
    }
  });
}

}  // namespace

bool takes(const ConvShape& s) {
  return int8_gemm::available() && s.groups == 1 && s.dw == 1 && s.c <= kMostChannels && (s.kh > 1 || s.kw > 1);
}

int64_t packed_bytes(const ConvShape& s) { return int8_gemm::packed_bytes(s.kh * run_bytes(s), s.o); }

void pack(const ConvShape& s, const int8_t* w, void* out) {
  const int64_t run = run_bytes(s), depth = s.kh * run;
  std::vector<int8_t> dense(static_cast<size_t>(depth * s.o), 0);  // [depth, o]
  for (int64_t o = 0; o < s.o; ++o)
    for (int64_t c = 0; c < s.c; ++c)
      for (int64_t i = 0; i < s.kh; ++i)
        for (int64_t j = 0; j < s.kw; ++j)
          dense[static_cast<size_t>((i * run + j * s.c + c) * s.o + o)] = w[((o * s.c + c) * s.kh + i) * s.kw + j];
  int8_gemm::pack(dense.data(), depth, s.o, s.o, 1, out);
}

void run(const ConvShape& s, const int8_gemm::Call& q, const void* x, const void* packed, void* y) {
  KILN_CHECK(takes(s), "int8_patch_conv::run: a convolution it does not take (check takes first)");
  const int64_t row_bytes = padded_columns(s) * s.c, image_bytes = padded_rows(s) * row_bytes;
  Tensor padded = Tensor::empty({s.n * image_bytes + kSlack}, DType::UInt8);
  uint8_t* images = padded.data<uint8_t>();
  std::memset(images + s.n * image_bytes, 0, kSlack);
  const int32_t zero = q.a_signed ? q.a_zero + 128 : q.a_zero;
  pad_images(s, static_cast<const uint8_t*>(x), q.a_signed, static_cast<uint8_t>(zero), images);
  int8_gemm::Call c = q;
  c.m = s.n * s.oh * s.ow, c.k = s.kh * run_bytes(s), c.n = s.o;
  c.lda = s.sw * s.c, c.ldy = s.o;
  c.a_signed = false, c.a_zero = zero;
  c.segments = s.kh, c.segment_stride = s.dh * row_bytes;
  c.block_rows = s.ow, c.block_stride = s.sh * row_bytes;
  c.image_blocks = s.oh, c.image_stride = image_bytes;
  int8_gemm::run(c, images, packed, y);
}

}  // namespace kiln::cpu::int8_patch_conv

// The CUDA elementwise kernels' addressing (src/backends/cuda/map_geometry.h),
// walked here on the host: every output element's offsets in every operand
// against the plain row-major walk, over broadcasts, transposes, slices and
// size-1 axes, and the merging that makes dense operands one flat axis.
#include <gtest/gtest.h>

#include <random>

#include "backends/cuda/map_geometry.h"
#include "support/error_message.h"

namespace kiln::cuda {
namespace {

using Dims = std::vector<int64_t>;

// Operand k's offset of output index `at` (aligned right; size-1 axes repeat).
int64_t plain_offset(const Dims& at, const Dims& shape, const Dims& strides) {
  int64_t off = 0;
  const size_t skip = at.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) off += at[skip + d] * strides[d];
  return off;
}

void expect_walks_like_plain_loops(const Dims& shape, const std::vector<Dims>& shapes,
                                   const std::vector<Dims>& strides) {
  const MapGeometry g = map_geometry(shape, shapes, strides);
  Dims at(shape.size(), 0);
  for (int64_t i = 0; i < g.numel; ++i) {
    int64_t off[MapGeometry::kMaxOperands];
    map_offsets(g, i, off);
    for (size_t k = 0; k < shapes.size(); ++k)
      ASSERT_EQ(off[k], plain_offset(at, shapes[k], strides[k])) << "element " << i << ", operand " << k;
    if (g.flat) {
      for (size_t k = 0; k < shapes.size(); ++k) ASSERT_EQ(off[k], i);
    }
    for (size_t d = shape.size(); d-- > 0;) {
      if (++at[d] < shape[d]) break;
      at[d] = 0;
    }
  }
}

Dims dense(const Dims& shape) {
  Dims s(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = step;
    step *= shape[d];
  }
  return s;
}

TEST(CudaMapGeometry, DenseOperandsOfOneShapeAreOneFlatAxis) {
  const Dims shape{4, 3, 5};
  const MapGeometry g = map_geometry(shape, {shape, shape, shape}, {dense(shape), dense(shape), dense(shape)});
  EXPECT_TRUE(g.flat);
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.numel, 60);
  expect_walks_like_plain_loops(shape, {shape, shape, shape}, {dense(shape), dense(shape), dense(shape)});
}

TEST(CudaMapGeometry, BroadcastsMergeWhatTheyCanAndAddressTheRest) {
  // A bias over channels: [2, 3, 4, 5] + [3, 1, 1]; the spatial axes merge.
  const Dims x{2, 3, 4, 5}, bias{3, 1, 1};
  const MapGeometry g = map_geometry(x, {x, x, bias}, {dense(x), dense(x), dense(bias)});
  EXPECT_FALSE(g.flat);
  EXPECT_EQ(g.rank, 3);  // [2, 3, 20]
  expect_walks_like_plain_loops(x, {x, x, bias}, {dense(x), dense(x), dense(bias)});
  // Row and column vectors into a matrix, and a scalar.
  expect_walks_like_plain_loops({3, 4}, {{3, 4}, {3, 1}, {4}}, {{4, 1}, {1, 0}, {1}});
  expect_walks_like_plain_loops({3, 4}, {{3, 4}, {}, {1, 4}}, {{4, 1}, {}, {0, 1}});
}

TEST(CudaMapGeometry, TransposedAndSlicedInputs) {
  // y[i, j] = x[j, i] (a transposed view) * z[i, 2j] (every other column).
  expect_walks_like_plain_loops({5, 7}, {{5, 7}, {5, 7}, {5, 7}}, {{7, 1}, {1, 5}, {14, 2}});
  // A size-1 axis anywhere has any stride.
  expect_walks_like_plain_loops({1, 6, 1, 2}, {{1, 6, 1, 2}, {1, 6, 1, 2}}, {{99, 2, 7, 1}, {0, 1, 3, 6}});
  // A scalar output.
  const MapGeometry s = map_geometry({}, {{}, {}}, {{}, {}});
  EXPECT_EQ(s.numel, 1);
  EXPECT_TRUE(s.flat);
}

TEST(CudaMapGeometry, RandomLayoutsWalkLikePlainLoops) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int rank = static_cast<int>(rng() % 6);
    Dims shape(static_cast<size_t>(rank));
    for (auto& s : shape) s = 1 + static_cast<int64_t>(rng() % 4);
    std::vector<Dims> shapes, strides;
    for (int k = 0; k < 3; ++k) {
      Dims sh = shape;
      if (k > 0) {  // inputs drop leading axes and broadcast some
        sh.erase(sh.begin(), sh.begin() + static_cast<int64_t>(rng() % (static_cast<unsigned>(rank) + 1)));
        for (auto& s : sh)
          if (rng() % 3 == 0) s = 1;
      }
      Dims st = dense(sh);
      if (sh.size() >= 2 && rng() % 2) {  // a permuted layout: strides of the axes reversed
        Dims rev(sh.rbegin(), sh.rend());
        Dims d = dense(rev);
        st.assign(d.rbegin(), d.rend());
      }
      shapes.push_back(sh);
      strides.push_back(st);
    }
    expect_walks_like_plain_loops(shape, shapes, strides);
  }
}

TEST(CudaMapGeometry, TooManyAxesAfterMergingSaysWhatToDo) {
  Dims shape(9, 2), strided(9);
  for (size_t d = 0; d < 9; ++d) strided[d] = int64_t{1} << (2 * (8 - d) + 1);  // every axis apart: none merge
  const std::string msg = kiln::testing::message_of([&] {
    map_geometry(shape, {shape, shape}, {dense(shape), strided});
  });
  EXPECT_NE(msg.find("takes 8 axes after merging, and these operands have 9; make them contiguous first"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace kiln::cuda

// where(c1, a, where(c2, b, z)) in an inference graph runs as one pass
// (nested_where.cpp): conditions over rows (a cache update's masks) and
// per element, the inner selection on either side, float32 and int64
// values; compiled, the same values as the two selections one by one.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/text_count.h"

namespace {
using namespace kiln;

TEST(NestedWhere, TwoSelectionsRunAsOnePassWithTheSameValues) {
  auto program = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];  // [2, 3, 8, 16]
    const Tensor rows = arange(8, DType::Int64).reshape({1, 1, 8, 1});
    const Tensor start = from_vector<int64_t>({3, 5}, {2, 1, 1, 1}), end = from_vector<int64_t>({4, 7}, {2, 1, 1, 1});
    const Tensor fresh = x.slice(2, 0, 1) * 2.0;  // one new row each, broadcast over the rows
    const Tensor zero = scalar_tensor(0.0);
    // The cache update's form: past rows, then the new ones, then zeros.
    const Tensor update = where(lt(rows, start), x, where(lt(rows, end), fresh, zero));
    // The inner selection as the then operand, conditions per element.
    const Tensor flipped =
        where(gt(x, scalar_tensor(0.5)), where(lt(x, scalar_tensor(-0.5)), x * 3.0, x + 1.0), x - 1.0);
    // int64 values.
    const Tensor ids = cast(x * 10.0, DType::Int64);
    const Tensor picked =
        where(lt(rows, start), ids, where(gt(ids, scalar_tensor(0.0, DType::Int64)), ids * 2, ids - 7));
    return std::vector<Tensor>{update, flipped, picked};
  };
  manual_seed(5);
  const Tensor x = randn({2, 3, 8, 16});
  jit::CompileOptions o;
  o.inference = true;
  auto fn = jit::compile(program, {x}, o);
  const std::string graph = fn.graph_text();
  EXPECT_EQ(kiln::testing::count(graph, "where(where)"), 3u) << graph;
  EXPECT_EQ(kiln::testing::count(graph, "= where(%"), 0u) << graph;  // no plain selection left
  const Tensor y = randn({2, 3, 8, 16});
  const std::vector<Tensor> got = fn({y}), want = program({y});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "output " << i);
    ASSERT_EQ(got[i].dtype(), want[i].dtype());
    EXPECT_EQ(cast(got[i], DType::Float64).contiguous().to_vector<double>(),
              cast(want[i], DType::Float64).contiguous().to_vector<double>());
  }
}

}  // namespace

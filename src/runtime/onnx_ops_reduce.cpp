// ONNX reductions: Reduce* and ArgMax/ArgMin.
#include <limits>

#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

using Reduce = Tensor (*)(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim);

Tensor sum_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sum(x, a, k); }
Tensor mean_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return mean(x, a, k); }
Tensor max_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return amax(x, a, k); }
Tensor min_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return amin(x, a, k); }
Tensor prod_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return prod(x, a, k); }
Tensor logsumexp_of(const Tensor& x, const std::vector<int64_t>& a, bool k) {
  if (a.empty()) {
    std::vector<int64_t> all;
    for (int64_t i = 0; i < x.dim(); ++i) all.push_back(i);
    return logsumexp(x, all, k);
  }
  return logsumexp(x, a, k);
}
Tensor l1_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sum(abs(x), a, k); }
Tensor l2_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sqrt(sum(x * x, a, k)); }
Tensor sum_square_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sum(x * x, a, k); }
Tensor log_sum_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return log(sum(x, a, k)); }

// `axes_input_since`: the opset from which axes is an input rather than an attribute.
Converter reduce(Reduce f, int axes_input_since) {
  return [f, axes_input_since](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = input(n, in, 0);
    std::vector<int64_t> axes;
    if (n.opset() >= axes_input_since) {
      if (in.size() > 1 && in[1].defined()) axes = int_values(n, in[1], "axes");
    } else {
      axes = n.ints("axes");
    }
    if (axes.empty() && n.i("noop_with_empty_axes", 0)) return {x + scalar_like(0, x)};
    for (int64_t& a : axes) a = normalize_axis(n, a, x.dim());
    bool keep = n.i("keepdims", 1) != 0;
    if (x.numel() == 0 && (f == max_of || f == min_of)) {
      // The maximum of nothing is the lowest value (ONNX 18+), the minimum the highest.
      Tensor shaped = sum(zeros(x.shape(), DType::Float32), axes, keep);
      double inf = std::numeric_limits<double>::infinity();
      return {full(shaped.shape(), f == max_of ? -inf : inf, x.dtype())};
    }
    if (x.dtype() == DType::Bool && (f == max_of || f == min_of))
      return {cast(f(cast(x, DType::UInt8), axes, keep), DType::Bool)};
    return {f(x, axes, keep)};
  };
}

Converter arg_reduce(bool max) {
  return [max](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    Tensor x = input(n, in, 0);
    int64_t axis = normalize_axis(n, n.i("axis", 0), x.dim());
    bool keep = n.i("keepdims", 1) != 0;
    if (!n.i("select_last_index", 0)) return {max ? argmax(x, axis, keep) : argmin(x, axis, keep)};
    // The last of equal values: search the reversed axis and map the index back.
    int64_t dim = x.shape()[axis];
    std::vector<int64_t> reversed;
    for (int64_t i = dim - 1; i >= 0; --i) reversed.push_back(i);
    Tensor flipped = index_select(x, axis, from_vector(reversed, Shape{dim}));
    Tensor idx = max ? argmax(flipped, axis, keep) : argmin(flipped, axis, keep);
    return {scalar_tensor(static_cast<double>(dim - 1), DType::Int64) - idx};
  };
}

}  // namespace

void add_reduce_converters(ConverterTable& t) {
  t["ReduceSum"] = reduce(sum_of, 13);
  t["ReduceMean"] = reduce(mean_of, 18);
  t["ReduceMax"] = reduce(max_of, 18);
  t["ReduceMin"] = reduce(min_of, 18);
  t["ReduceProd"] = reduce(prod_of, 18);
  t["ReduceLogSumExp"] = reduce(logsumexp_of, 18);
  t["ReduceL1"] = reduce(l1_of, 18);
  t["ReduceL2"] = reduce(l2_of, 18);
  t["ReduceSumSquare"] = reduce(sum_square_of, 18);
  t["ReduceLogSum"] = reduce(log_sum_of, 18);
  t["ArgMax"] = arg_reduce(true);
  t["ArgMin"] = arg_reduce(false);
}

}  // namespace kiln::runtime

// ONNX reductions that are compositions of Kiln ops (the others are read by
// their ops: ReduceSum by sum, ReduceMax by amax, ...).
#include "kiln/functional.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {
namespace {

using Reduce = Tensor (*)(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim);

Tensor l1_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sum(abs(x), a, k); }
Tensor l2_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sqrt(sum(x * x, a, k)); }
Tensor sum_square_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return sum(x * x, a, k); }
Tensor log_sum_of(const Tensor& x, const std::vector<int64_t>& a, bool k) { return log(sum(x, a, k)); }

// Axes an attribute, or an input from opset 18 on; none means all of them.
Converter reduce(Reduce f) {
  return [f](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    const Tensor& x = input(n, in, 0);
    std::vector<int64_t> axes = n.axes_input(in, 1, 18);
    if (axes.empty() && n.i("noop_with_empty_axes", 0)) return {x + scalar_like(0, x)};
    for (int64_t& a : axes) a = normalize_axis(n, a, x.dim());
    return {f(x, axes, n.i("keepdims", 1) != 0)};
  };
}

}  // namespace

void add_reduce_converters(ConverterTable& t) {
  t["ReduceL1"] = reduce(l1_of);
  t["ReduceL2"] = reduce(l2_of);
  t["ReduceSumSquare"] = reduce(sum_square_of);
  t["ReduceLogSum"] = reduce(log_sum_of);
}

}  // namespace kiln::runtime

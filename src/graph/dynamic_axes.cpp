#include "graph/dynamic_axes.h"

#include <algorithm>

#include "kiln/error.h"
#include "kiln/functional.h"

namespace kiln::jit::detail {
namespace {

std::string axis_name(const DynamicAxis& a) {
  return "input " + std::to_string(a.input) + "'s axis " + std::to_string(a.axis);
}

void check_axis(const DynamicAxis& a, const std::vector<Tensor>& inputs) {
  KILN_CHECK(a.input >= 0 && static_cast<size_t>(a.input) < inputs.size() && inputs[a.input].defined(),
             "dynamic axis: the function takes ", inputs.size(), " inputs; there is no input ", a.input);
  const Tensor& x = inputs[a.input];
  KILN_CHECK(a.axis >= 0 && a.axis < x.dim(), "dynamic axis: input ", a.input, " is ", x.meta_str(),
             ", which has no axis ", a.axis);
  for (size_t i = 0; i < a.buckets.size(); ++i)
    KILN_CHECK(a.buckets[i] > 0 && (i == 0 || a.buckets[i] > a.buckets[i - 1]), "dynamic axis: ", axis_name(a),
               " has buckets that do not ascend from 1 up; give sizes such as {32, 64, 128}");
}

}  // namespace

Bucketed pad_to_buckets(const std::vector<DynamicAxis>& axes, const std::vector<Tensor>& inputs) {
  Bucketed b{inputs, {}};
  for (const DynamicAxis& a : axes) {
    check_axis(a, inputs);
    if (a.buckets.empty()) continue;
    Tensor& x = b.inputs[a.input];
    const int64_t size = x.shape()[a.axis];
    auto it = std::lower_bound(a.buckets.begin(), a.buckets.end(), size);
    KILN_CHECK(it != a.buckets.end(), axis_name(a), " has size ", size, ", past its largest bucket (",
               a.buckets.back(), "); add a larger bucket, or split the input");
    if (*it == size) continue;
    std::vector<int64_t> pads(static_cast<size_t>(2 * (x.dim() - a.axis)), 0);  // last axis first, (before, after)
    pads.back() = *it - size;
    x = pad(x, pads, "constant", a.pad_value);
    b.padded.push_back({&a, size, *it});
  }
  return b;
}

std::vector<Tensor> cut_to_sizes(const Bucketed& call, const std::vector<Tensor>& outputs) {
  std::vector<Tensor> cut = outputs;
  for (const auto& p : call.padded) {
    auto trim = [&](Tensor& t, int axis) {
      KILN_CHECK(axis >= 0 && axis < t.dim() && t.shape()[axis] == p.bucket, "dynamic axis: output axis ", axis,
                 " of ", t.meta_str(), " does not follow ", axis_name(*p.axis), " (padded to ", p.bucket, ")");
      t = t.slice(axis, 0, p.size);
    };
    if (!p.axis->outputs.empty()) {
      for (auto [output, axis] : p.axis->outputs) {
        KILN_CHECK(output >= 0 && static_cast<size_t>(output) < cut.size(), "dynamic axis: the function returns ",
                   cut.size(), " outputs; there is no output ", output);
        trim(cut[output], axis);
      }
      continue;
    }
    for (Tensor& t : cut)
      if (t.defined() && p.axis->axis < t.dim() && t.shape()[p.axis->axis] == p.bucket) trim(t, p.axis->axis);
  }
  return cut;
}

bool only_dynamic_axes_differ(const std::vector<DynamicAxis>& axes, const std::vector<Shape>& was,
                              const std::vector<Tensor>& now, std::string* which) {
  if (axes.empty() || was.size() != now.size()) return false;
  bool any = false;
  for (size_t i = 0; i < now.size(); ++i) {
    const Shape s = now[i].defined() ? now[i].shape() : Shape{};
    if (s.size() != was[i].size()) return false;
    for (size_t d = 0; d < s.size(); ++d) {
      if (s[d] == was[i][d]) continue;
      const bool dynamic = std::any_of(axes.begin(), axes.end(), [&](const DynamicAxis& a) {
        return static_cast<size_t>(a.input) == i && static_cast<size_t>(a.axis) == d;
      });
      if (!dynamic) return false;
      if (!any)
        *which = "input " + std::to_string(i) + "'s dynamic axis " + std::to_string(d) + " went from " +
                 std::to_string(was[i][d]) + " to " + std::to_string(s[d]);
      any = true;
    }
  }
  return any;
}

}  // namespace kiln::jit::detail

#include "bench_shapes.h"

#include <optional>

#include "kiln/error.h"

namespace kiln::cli {
namespace {

int64_t positive(const std::string& text, const std::string& spec) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KILN_CHECK(used == text.size() && !text.empty() && v > 0, "bench: --shape ", spec, ": '", text,
             "' is not a size; write sizes as 1x37, with at most one range such as 1x20..59");
  return v;
}

}  // namespace

BenchShapes parse_bench_shapes(const std::vector<std::string>& specs, const std::vector<TensorInfo>& inputs) {
  std::map<std::string, Shape> fixed;
  std::optional<std::pair<std::string, size_t>> ranged;  // the input and axis of the range
  int64_t lo = 0, hi = 0;
  BenchShapes out;
  for (const auto& spec : specs) {
    const size_t eq = spec.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "bench: --shape takes NAME=DIMS, such as input=1x37, not '", spec, "'");
    const std::string name = spec.substr(0, eq);
    const TensorInfo* info = nullptr;
    std::string names;
    for (const auto& i : inputs) {
      if (i.name == name) info = &i;
      names += (names.empty() ? "" : ", ") + i.name;
    }
    KILN_CHECK(info != nullptr, "bench: --shape ", spec, ": the model has no input '", name, "'; its inputs: ", names);
    KILN_CHECK(!fixed.count(name), "bench: --shape gives '", name, "' twice");
    Shape s;
    std::string rest = spec.substr(eq + 1);
    for (size_t start = 0; start <= rest.size();) {
      const size_t x = rest.find('x', start);
      const std::string dim = rest.substr(start, x == std::string::npos ? std::string::npos : x - start);
      const size_t dots = dim.find("..");
      if (dots == std::string::npos) {
        s.push_back(positive(dim, spec));
      } else {
        KILN_CHECK(!ranged, "bench: --shape: only one axis of one input may be a range (", spec, ")");
        lo = positive(dim.substr(0, dots), spec);
        hi = positive(dim.substr(dots + 2), spec);
        KILN_CHECK(lo <= hi, "bench: --shape ", spec, ": the range ", lo, "..", hi, " is empty");
        ranged = std::make_pair(name, s.size());
        s.push_back(lo);
      }
      if (x == std::string::npos) break;
      start = x + 1;
    }
    if (info->shape_known) {
      KILN_CHECK(s.size() == info->shape.size(), "bench: --shape ", spec, " has ", s.size(), " axes; ", info->str());
      for (size_t d = 0; d < s.size(); ++d) {
        const bool range_here = ranged && ranged->first == name && ranged->second == d;
        KILN_CHECK(info->shape[d] < 0 || (info->shape[d] == s[d] && !range_here), "bench: --shape ", spec, ": axis ", d,
                   " of '", name, "' is fixed at ", info->shape[d], " (", info->str(), ")");
      }
    }
    fixed[name] = s;
    out.label += (out.label.empty() ? "" : " ") + spec;
  }
  for (const auto& i : inputs) {
    if (fixed.count(i.name)) continue;
    bool known = i.shape_known && !i.shape.empty();
    for (int64_t d : i.shape) known = known && d >= 0;
    KILN_CHECK(known, "bench: input '", i.name, "' has no fixed shape (", i.str(), "); give it with --shape ", i.name,
               "=DIMS, such as --shape ", i.name, "=1x37 (or a range of lengths, 1x20..59)");
    fixed[i.name] = Shape(i.shape.begin(), i.shape.end());
  }
  if (!ranged) {
    out.sets.push_back(fixed);
    return out;
  }
  for (int64_t v = lo; v <= hi; ++v) {
    auto set = fixed;
    set[ranged->first][ranged->second] = v;
    std::string label = ranged->first;
    for (size_t d = 0; d < set[ranged->first].size(); ++d) {
      label += d == 0 ? '=' : 'x';
      label += std::to_string(set[ranged->first][d]);
    }
    out.set_labels.push_back(std::move(label));
    out.sets.push_back(std::move(set));
  }
  return out;
}

}  // namespace kiln::cli

// Printing tensors, PyTorch style: nested brackets, aligned columns, and
// long axes abbreviated with "...".
#include <cmath>
#include <iomanip>
#include <sstream>

#include "core/read_observer.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

constexpr int64_t kEdgeItems = 3;
constexpr int64_t kSummarizeAbove = 1000;

std::string format_value(double v, DType dtype, bool fixed) {
  std::ostringstream os;
  if (dtype == DType::Bool) return v != 0 ? "true" : "false";
  if (!is_floating(dtype)) {
    os << static_cast<int64_t>(v);
    return os.str();
  }
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (fixed) {
    os << std::fixed << std::setprecision(4) << v;
  } else {
    os << std::scientific << std::setprecision(4) << v;
  }
  return os.str();
}

void print_rec(std::ostream& os, const std::vector<double>& vals, const Shape& shape, size_t axis, int64_t base,
               int64_t stride_div, DType dtype, bool fixed, size_t width, bool summarize, int indent) {
  int64_t n = shape[axis];
  int64_t inner = stride_div / n;
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << (axis + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdgeItems;
    }
    if (axis + 1 == shape.size()) {
      std::string s = format_value(vals[base + i], dtype, fixed);
      os << std::string(width > s.size() ? width - s.size() : 0, ' ') << s;
      if (i + 1 < n) os << ", ";
    } else {
      print_rec(os, vals, shape, axis + 1, base + i * inner, inner, dtype, fixed, width, summarize, indent + 1);
      if (i + 1 < n) os << "," << std::string(shape.size() - axis - 1, '\n') << std::string(indent + 1, ' ');
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  detail::observe_read(*this, "printing it (operator<< or str())");
  if (!defined()) return "tensor(undefined)";
  std::vector<double> vals = to_vector<double>();
  bool fixed = true;
  size_t width = 1;
  for (double v : vals) {
    double a = std::fabs(v);
    if (std::isfinite(v) && a != 0 && (a >= 1e8 || a < 1e-4)) fixed = false;
  }
  for (double v : vals) width = std::max(width, format_value(v, dtype(), fixed).size());
  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << format_value(vals[0], dtype(), fixed);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_rec(os, vals, shape(), 0, 0, numel(), dtype(), fixed, width, numel() > kSummarizeAbove, 7);
  }
  os << ", dtype=" << dtype_name(dtype()) << ", shape=" << shape_str(shape());
  if (requires_grad()) os << (grad_fn() ? ", grad_fn" : ", requires_grad=true");
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln

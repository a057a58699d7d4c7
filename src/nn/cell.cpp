#include <iomanip>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/nn.h"

namespace kiln::nn {

Tensor Cell::register_parameter(const std::string& name, Tensor value, bool trainable) {
  KILN_CHECK(name.find('.') == std::string::npos && !name.empty(), "parameter name '", name,
             "' must be non-empty and contain no '.'");
  for (auto& [n, _] : params_) KILN_CHECK(n != name, "parameter '", name, "' is registered twice");
  value = value.detach();
  if (trainable) value.set_requires_grad(true);
  params_.emplace_back(name, value);
  return value;
}

Tensor Cell::register_buffer(const std::string& name, Tensor value) {
  for (auto& [n, _] : buffers_) KILN_CHECK(n != name, "buffer '", name, "' is registered twice");
  buffers_.emplace_back(name, value);
  return value;
}

void Cell::add_child(const std::string& name, std::shared_ptr<Cell> cell) {
  KILN_CHECK(cell != nullptr, "register_cell('", name, "') got a null cell");
  for (auto& [n, _] : children_) KILN_CHECK(n != name, "child cell '", name, "' is registered twice");
  children_.emplace_back(name, std::move(cell));
}

void Cell::set_train(bool mode) {
  apply([mode](Cell& c) { c.training_ = mode; });
}

void Cell::collect(const std::string& prefix, bool buffers, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (auto& [n, c] : children_) c->collect(prefix + n + ".", buffers, out);
}

std::vector<std::pair<std::string, Tensor>> Cell::parameters_and_names() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", false, out);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Cell::buffers_and_names() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", true, out);
  return out;
}

std::vector<Tensor> Cell::trainable_params() const {
  std::vector<Tensor> out;
  for (auto& [_, t] : parameters_and_names())
    if (t.requires_grad()) out.push_back(t);
  return out;
}

int64_t Cell::parameter_count(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [_, t] : parameters_and_names())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

void Cell::freeze(const std::string& prefix, bool frozen) {
  int matched = 0;
  for (auto& [name, t] : parameters_and_names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    Tensor p = t;
    if (frozen) p.zero_grad();
    p.set_requires_grad(!frozen);
    ++matched;
  }
  KILN_CHECK(matched > 0, "freeze('", prefix, "'): no parameter name starts with it; see summary() for the names");
}

void Cell::apply(const std::function<void(Cell&)>& fn) {
  fn(*this);
  for (auto& [_, c] : children_) c->apply(fn);
}

std::string Cell::summary() const {
  std::ostringstream os;
  auto params = parameters_and_names();
  size_t width = 4;
  for (auto& [n, _] : params) width = std::max(width, n.size());
  for (auto& [n, _] : buffers_and_names()) width = std::max(width, n.size());
  os << type_name();
  if (!extra_repr().empty()) os << '(' << extra_repr() << ')';
  os << '\n';
  os << std::left << std::setw(static_cast<int>(width) + 2) << "name" << std::setw(20) << "shape" << std::setw(12)
     << "count"
     << "kind\n";
  for (auto& [n, t] : params)
    os << std::setw(static_cast<int>(width) + 2) << n << std::setw(20) << shape_str(t.shape()) << std::setw(12)
       << t.numel() << (t.requires_grad() ? "trainable" : "frozen") << "\n";
  for (auto& [n, t] : buffers_and_names())
    os << std::setw(static_cast<int>(width) + 2) << n << std::setw(20) << shape_str(t.shape()) << std::setw(12)
       << t.numel() << "buffer\n";
  os << "parameters: " << parameter_count() << " (" << parameter_count(true) << " trainable)\n";
  return os.str();
}

}  // namespace kiln::nn

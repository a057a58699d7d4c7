#include <cxxabi.h>

#include <cstdlib>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <typeinfo>

#include "core/cell_frames.h"
#include "kiln/autograd.h"
#include "kiln/caller_language.h"
#include "kiln/grad_mode.h"
#include "kiln/nn.h"
#include "kiln/nn/losses.h"

namespace kiln::nn {
namespace {

std::string demangled(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && name ? std::string(name.get()) : std::string(type.name());
}

bool reachable(const Cell& from, const Cell* target) {
  if (&from == target) return true;
  for (auto& [_, c] : from.children())
    if (reachable(*c, target)) return true;
  return false;
}

// The path of `target` below `from` ("layers.0"), or false when not there.
bool path_to(const Cell& from, const Cell* target, std::string& path) {
  for (auto& [name, c] : from.children()) {
    std::string here = path.empty() ? name : path + "." + name;
    if (c.get() == target) {
      path = here;
      return true;
    }
    if (path_to(*c, target, here)) {
      path = here;
      return true;
    }
  }
  return false;
}

struct FramePop {
  std::vector<detail::CellFrame>& frames;
  ~FramePop() { frames.pop_back(); }
};

// A cell's floating input in its compute dtype (to_float); anything else as is.
Tensor in_compute_dtype(const Tensor& t, DType dtype) {
  return is_floating(t.dtype()) && t.dtype() != dtype ? cast(t, dtype) : t;
}

void check_compute_dtype(const std::string& who, DType dtype) {
  KILN_CHECK(is_floating(dtype), who, ".to_float(", dtype_name(dtype),
             "): the compute dtype must be floating point (float16, bfloat16, float32 or float64)");
}

}  // namespace

const std::string& Cell::frame_type() const {
  static std::mutex mu;  // the first calls of a Cell may come from several threads
  std::lock_guard<std::mutex> lock(mu);
  if (library_ < 0) {
    std::string full = demangled(typeid(*this));
    library_ = full.rfind("kiln::", 0) == 0;
    frame_type_ = type_name();
    if (frame_type_ == "Cell") {  // the user did not name it: the class name says more
      size_t template_at = full.find('<');
      size_t colon = full.rfind("::", template_at);
      frame_type_ = colon == std::string::npos ? full : full.substr(colon + 2);
    }
  }
  return frame_type_;
}

std::string Cell::display_name() const {
  const auto& frames = detail::cell_frames();
  std::string path;
  if (!frames.empty() && path_to(*static_cast<const Cell*>(frames.front().cell), this, path))
    return frame_type() + " '" + path + "'";
  return frame_type();
}

void Cell::check_registered_in_caller() const {
  auto& frames = detail::cell_frames();
  if (frames.empty()) return;
  const Cell* root = static_cast<const Cell*>(frames.front().cell);
  if (reachable(*root, this)) return;
  std::string trainable;
  for (auto& [name, t] : parameters_and_names())
    if (t.requires_grad()) {
      if (!trainable.empty()) trainable += ", ";
      trainable += name;
      trainable += ' ';
      trainable += shape_str(t.shape());
    }
  if (trainable.empty()) return;  // nothing it holds would be trained (a frozen teacher, an activation)
  const Cell* caller = static_cast<const Cell*>(frames.back().cell);
  std::string self = frame_type(), repr = extra_repr();
  if (!repr.empty()) self.append("(").append(repr).append(")");
  if (caller_language() == CallerLanguage::Python)
    KILN_FAIL("Cell '", caller->frame_type(), "' calls a ", self, " that is not registered in it, so its parameters (",
              trainable, ") are not trained, saved or listed. Assign it as an attribute in ", caller->frame_type(),
              ".__init__: self.name = nn.", frame_type(), "(...); cells in a Python list need nn.CellList([...])");
  KILN_FAIL("Cell '", caller->frame_type(), "' calls a ", self, " that is not registered in it, so its parameters (",
            trainable, ") are not trained, saved or listed. Register it where it is created, in ",
            caller->frame_type(), "'s constructor: member = register_cell(\"name\", std::make_shared<",
            frame_type(), ">(...)); a Cell held in a std::vector needs a CellList or one register_cell per element");
}

Tensor Cell::operator()(const Tensor& x) {
  auto& frames = detail::cell_frames();
  if (!registration_checked_ && !frames.empty()) {  // a top-level call has no caller to check against
    check_registered_in_caller();
    registration_checked_ = true;
  }
  const std::string& type = frame_type();
  frames.push_back({this, &type, library_ == 1});
  FramePop pop{frames};
  if (compute_dtype_) {
    ComputeDTypeScope scope(compute_dtype_);
    return construct(in_compute_dtype(x, *compute_dtype_));
  }
  if (!autocast_) return construct(x);
  AutocastScope scope(autocast_);
  return construct(x);
}

Tensor LossCell::operator()(const Tensor& outputs, const Tensor& targets) {
  if (!compute_dtype_) return construct(outputs, targets);
  ComputeDTypeScope scope(compute_dtype_);
  return construct(in_compute_dtype(outputs, *compute_dtype_), in_compute_dtype(targets, *compute_dtype_));
}

LossCell& LossCell::to_float(DType dtype) {
  check_compute_dtype("loss", dtype);
  compute_dtype_ = dtype;
  return *this;
}

Cell& Cell::set_autocast(std::optional<DType> dtype) {
  AutocastScope check(dtype);  // refuses anything but bfloat16 and float16, naming them
  autocast_ = dtype;
  return *this;
}

Cell& Cell::to_float(DType dtype) {
  check_compute_dtype(display_name(), dtype);
  compute_dtype_ = dtype;
  return *this;
}

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

void Cell::to(Device device) {
  for (auto& [name, t] : parameters_and_names()) t.impl().storage->move_to(device);
  for (auto& [name, t] : buffers_and_names()) t.impl().storage->move_to(device);
}

Device Cell::device() const {
  for (const auto& [name, p] : parameters_and_names()) return p.device();
  return cpu_device();
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

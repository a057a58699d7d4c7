#include "kiln/attrs.h"

#include <sstream>

#include "kiln/error.h"

namespace kiln {

Attrs& Attrs::set(const std::string& name, AttrValue v) {
  for (auto& [n, value] : items_) {
    if (n == name) {
      value = std::move(v);
      return *this;
    }
  }
  items_.emplace_back(name, std::move(v));
  return *this;
}

const AttrValue* Attrs::find(const std::string& name) const {
  for (auto& [n, value] : items_)
    if (n == name) return &value;
  return nullptr;
}

bool Attrs::has(const std::string& name) const { return find(name) != nullptr; }

namespace {
template <typename T>
const T& get_as(const Attrs& a, const std::string& name, const char* type) {
  const AttrValue* v = a.find(name);
  KILN_CHECK(v != nullptr, "missing attribute '", name, "' (", type, ")");
  const T* p = std::get_if<T>(v);
  KILN_CHECK(p != nullptr, "attribute '", name, "' must be of type ", type);
  return *p;
}
}  // namespace

int64_t Attrs::get_int(const std::string& name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<bool>(*v)) return std::get<bool>(*v) ? 1 : 0;
  return get_as<int64_t>(*this, name, "int");
}
int64_t Attrs::get_int(const std::string& name, int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}
double Attrs::get_float(const std::string& name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  return get_as<double>(*this, name, "float");
}
double Attrs::get_float(const std::string& name, double fallback) const {
  return has(name) ? get_float(name) : fallback;
}
bool Attrs::get_bool(const std::string& name, bool fallback) const {
  const AttrValue* v = find(name);
  if (!v) return fallback;
  if (std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v) != 0;
  return get_as<bool>(*this, name, "bool");
}
std::string Attrs::get_string(const std::string& name, const std::string& fallback) const {
  return has(name) ? get_as<std::string>(*this, name, "string") : fallback;
}
std::vector<int64_t> Attrs::get_ints(const std::string& name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<int64_t>(*v)) return {std::get<int64_t>(*v)};
  return get_as<std::vector<int64_t>>(*this, name, "int list");
}
std::vector<int64_t> Attrs::get_ints(const std::string& name, const std::vector<int64_t>& fallback) const {
  return has(name) ? get_ints(name) : fallback;
}
std::vector<double> Attrs::get_floats(const std::string& name, const std::vector<double>& fallback) const {
  return has(name) ? get_as<std::vector<double>>(*this, name, "float list") : fallback;
}
std::vector<std::string> Attrs::get_strings(const std::string& name, const std::vector<std::string>& fallback) const {
  return has(name) ? get_as<std::vector<std::string>>(*this, name, "string list") : fallback;
}
DType Attrs::get_dtype(const std::string& name) const { return get_as<DType>(*this, name, "dtype"); }

std::string Attrs::str() const {
  std::ostringstream os;
  bool first = true;
  for (auto& [n, v] : items_) {
    os << (first ? "" : ", ") << n << "=";
    first = false;
    std::visit(
        [&](auto&& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> || std::is_same_v<T, std::vector<double>> ||
                        std::is_same_v<T, std::vector<std::string>>) {
            os << "[";
            for (size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
            os << "]";
          } else if constexpr (std::is_same_v<T, DType>) {
            os << dtype_name(x);
          } else if constexpr (std::is_same_v<T, bool>) {
            os << (x ? "true" : "false");
          } else {
            os << x;
          }
        },
        v);
  }
  return os.str();
}

}  // namespace kiln

#pragma once
// Named attributes of an op call (axis, stride, eps, ...).
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/dtype.h"

namespace kiln {

using AttrValue =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, DType,
                 std::vector<std::string>>;

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) : items_(items) {}

  Attrs& set(const std::string& name, AttrValue v);
  bool has(const std::string& name) const;
  const AttrValue* find(const std::string& name) const;

  int64_t get_int(const std::string& name) const;
  int64_t get_int(const std::string& name, int64_t fallback) const;
  double get_float(const std::string& name) const;
  double get_float(const std::string& name, double fallback) const;
  bool get_bool(const std::string& name, bool fallback) const;
  std::string get_string(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> get_ints(const std::string& name) const;
  std::vector<int64_t> get_ints(const std::string& name, const std::vector<int64_t>& fallback) const;
  std::vector<double> get_floats(const std::string& name, const std::vector<double>& fallback) const;
  std::vector<std::string> get_strings(const std::string& name, const std::vector<std::string>& fallback) const;
  DType get_dtype(const std::string& name) const;

  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  std::string str() const;

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace kiln

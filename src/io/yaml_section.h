#pragma once
// Reading a YAML mapping with validation: unknown keys, wrong types and values
// outside a set of choices fail with the file, the key and what is allowed.
#include <yaml-cpp/yaml.h>

#include <set>
#include <string>

#include "kiln/error.h"

namespace kiln::detail {

inline std::string join(const std::set<std::string>& s) {
  std::string out;
  for (auto& v : s) out += (out.empty() ? "" : ", ") + v;
  return out;
}

// Reads the keys of a mapping, refusing any it does not know.
class YamlSection {
 public:
  YamlSection(const YAML::Node& node, std::string where, std::set<std::string> allowed, const std::string& source)
      : node_(node), where_(std::move(where)), source_(source) {
    KILN_CHECK(node.IsMap(), source, ": ", where_, " must be a mapping of keys to values");
    for (auto it = node.begin(); it != node.end(); ++it) {
      std::string key = it->first.as<std::string>();
      KILN_CHECK(allowed.count(key), source, ": unknown key '", key, "' in ", where_, "; allowed keys: ", join(allowed));
    }
  }
  template <typename T>
  void read(const std::string& key, T& out) const {
    if (!node_[key]) return;
    try {
      out = node_[key].as<T>();
    } catch (const YAML::Exception&) {
      KILN_FAIL(source_, ": ", where_, key.empty() ? "" : ".", key, " has a value of the wrong type ('",
                YAML::Dump(node_[key]), "')");
    }
  }
  void read_choice(const std::string& key, std::string& out, const std::set<std::string>& choices) const {
    read(key, out);
    KILN_CHECK(choices.count(out), source_, ": ", where_, ".", key, " is '", out, "'; allowed values: ", join(choices));
  }
  YAML::Node operator[](const std::string& key) const { return node_[key]; }

 private:
  YAML::Node node_;
  std::string where_;
  const std::string& source_;
};

}  // namespace kiln::detail

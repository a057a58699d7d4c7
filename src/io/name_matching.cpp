#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>

#include "kiln/functional.h"
#include "kiln/migrate.h"

namespace kiln::io {
namespace {

std::string module_of(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot);
}

// Drops wrapper prefixes and plural "s" on word parts: "module.layers.0.weight" -> "layer.0.weight".
std::string normalized(const std::string& name) {
  std::string n = name;
  for (const char* prefix : {"module.", "model.", "state_dict.", "net."})
    while (n.rfind(prefix, 0) == 0) n = n.substr(std::string(prefix).size());
  std::string out, part;
  auto flush = [&] {
    if (part.size() > 3 && part.back() == 's' && !std::isdigit(static_cast<unsigned char>(part[0]))) part.pop_back();
    out += (out.empty() ? "" : ".") + part;
    part.clear();
  };
  for (char c : n) {
    if (c == '.') flush();
    else part += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  flush();
  return out;
}

bool matches_any(const std::string& name, const std::vector<std::string>& patterns) {
  for (const auto& p : patterns)
    if (std::regex_search(name, std::regex(p))) return true;
  return false;
}

Shape transposed(const Shape& s) { return s.size() == 2 ? Shape{s[1], s[0]} : s; }

}  // namespace

std::vector<TensorInfo> infos_of(const NamedTensors& tensors) {
  std::vector<TensorInfo> out;
  for (auto& [n, t] : tensors) out.push_back({n, t.dtype(), t.shape()});
  return out;
}

std::vector<TensorInfo> infos_of(const nn::Cell& cell) {
  std::vector<TensorInfo> out;
  auto buffers = cell.buffers_and_names();
  std::set<std::string> placed;
  auto place_buffers = [&](const std::string& module) {
    for (auto& [n, t] : buffers)
      if (module_of(n) == module && placed.insert(n).second) out.push_back({n, t.dtype(), t.shape()});
  };
  auto params = cell.parameters_and_names();
  for (size_t i = 0; i < params.size(); ++i) {
    out.push_back({params[i].first, params[i].second.dtype(), params[i].second.shape()});
    std::string module = module_of(params[i].first);
    if (i + 1 == params.size() || module_of(params[i + 1].first) != module) place_buffers(module);
  }
  for (auto& [n, t] : buffers)
    if (placed.insert(n).second) out.push_back({n, t.dtype(), t.shape()});
  return out;
}

RenameRules load_rename_rules(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    KILN_FAIL("cannot read rename rules '", path, "': ", e.what());
  }
  RenameRules rules;
  auto check_regex = [&](const std::string& p) {
    try {
      std::regex r(p);
    } catch (const std::regex_error& e) {
      KILN_FAIL("'", path, "': '", p, "' is not a valid regular expression: ", e.what());
    }
    return p;
  };
  for (auto it = root.begin(); root.IsMap() && it != root.end(); ++it) {
    std::string key = it->first.as<std::string>();
    KILN_CHECK(key == "rename" || key == "transpose" || key == "ignore", "'", path, "': unknown key '", key,
               "'; allowed keys: ignore, rename, transpose");
  }
  KILN_CHECK(root.IsMap() || root.IsNull(), "'", path, "' must be a mapping with rename, transpose and ignore");
  for (const auto& r : root["rename"]) {
    KILN_CHECK(r.IsMap() && r["from"] && r["to"], "'", path, "': each rename rule needs from and to, e.g. ",
               "{from: '^features\\.', to: ''}");
    rules.rename.emplace_back(check_regex(r["from"].as<std::string>()), r["to"].as<std::string>());
  }
  for (const auto& t : root["transpose"]) rules.transpose.push_back(check_regex(t.as<std::string>()));
  for (const auto& t : root["ignore"]) rules.ignore.push_back(check_regex(t.as<std::string>()));
  return rules;
}

MatchResult match_names(const std::vector<TensorInfo>& source, const std::vector<TensorInfo>& target,
                        const RenameRules& rules) {
  MatchResult m;
  std::vector<TensorInfo> src;
  std::vector<std::string> renamed;
  for (const auto& s : source) {
    if (matches_any(s.name, rules.ignore) || is_mindspore_optimizer_state(s.name) ||
        (s.name.size() >= 19 && s.name.compare(s.name.size() - 19, 19, "num_batches_tracked") == 0)) {
      m.ignored.push_back(s.name);
      continue;
    }
    std::string n = s.name;
    for (const auto& [from, to] : rules.rename) n = std::regex_replace(n, std::regex(from), to);
    src.push_back(s);
    renamed.push_back(n);
  }
  std::vector<bool> src_used(src.size(), false), tgt_used(target.size(), false);
  // A transpose rule may name the entry as the file spells it or as renamed.
  auto transposes = [&](size_t i) {
    return matches_any(renamed[i], rules.transpose) || matches_any(src[i].name, rules.transpose);
  };
  auto take = [&](size_t i, size_t j, const std::string& how) {
    bool t = transposes(i);
    Shape shape = t ? transposed(src[i].shape) : src[i].shape;
    const bool reshape = mindspore_layout_differs(shape, target[j].shape);
    if (shape != target[j].shape && !reshape) return false;
    m.matched.push_back({src[i].name, target[j].name, how, t, reshape});
    src_used[i] = tgt_used[j] = true;
    return true;
  };
  std::map<std::string, size_t> target_index, target_norm;
  for (size_t j = 0; j < target.size(); ++j) {
    target_index[target[j].name] = j;
    target_norm[normalized(target[j].name)] = j;
  }
  for (size_t i = 0; i < src.size(); ++i) {  // exact names (after the rules)
    auto it = target_index.find(renamed[i]);
    if (it != target_index.end() && !tgt_used[it->second])
      take(i, it->second, renamed[i] == src[i].name ? "same name" : "rule");
  }
  for (size_t i = 0; i < src.size(); ++i) {  // MindSpore's names
    if (src_used[i]) continue;
    auto it = target_index.find(kiln_name_for_mindspore(renamed[i], target));
    if (it != target_index.end() && !tgt_used[it->second]) take(i, it->second, "MindSpore name");
  }
  for (size_t i = 0; i < src.size(); ++i) {  // normalised names
    if (src_used[i]) continue;
    auto it = target_norm.find(normalized(renamed[i]));
    if (it != target_norm.end() && !tgt_used[it->second]) take(i, it->second, "similar name");
  }
  // Order: the remaining entries of both lists, pairwise, while the shapes agree.
  std::vector<size_t> rs, rt;
  for (size_t i = 0; i < src.size(); ++i)
    if (!src_used[i]) rs.push_back(i);
  for (size_t j = 0; j < target.size(); ++j)
    if (!tgt_used[j]) rt.push_back(j);
  if (rs.size() == rt.size()) {
    bool all_fit = true;
    for (size_t k = 0; k < rs.size() && all_fit; ++k) {
      bool t = transposes(rs[k]);
      all_fit = (t ? transposed(src[rs[k]].shape) : src[rs[k]].shape) == target[rt[k]].shape;
    }
    if (all_fit)
      for (size_t k = 0; k < rs.size(); ++k) take(rs[k], rt[k], "order and shape");
  }
  for (size_t i = 0; i < src.size(); ++i)
    if (!src_used[i]) m.unmatched_source.push_back(src[i]);
  for (size_t j = 0; j < target.size(); ++j)
    if (!tgt_used[j]) m.unmatched_target.push_back(target[j]);
  for (const auto& t : m.unmatched_target) {
    std::vector<std::string> fits;
    bool needs_transpose = false;
    for (const auto& s : m.unmatched_source) {
      bool as_is = s.shape == t.shape, flipped = s.shape.size() == 2 && transposed(s.shape) == t.shape;
      if (!as_is && !flipped) continue;
      fits.push_back(s.name);
      needs_transpose = !as_is;
    }
    if (fits.size() == 1 && needs_transpose)
      m.suggestions.push_back(t.name + " <- " + fits[0] + ", rename and transpose (the only unmatched entry that " +
                              "fits once transposed: add a rename rule and list it under transpose)");
    else if (fits.size() == 1)
      m.suggestions.push_back(t.name + " <- " + fits[0] + " (the only unmatched entry of a fitting shape)");
    else if (fits.size() > 1)
      m.suggestions.push_back(t.name + ": ambiguous, " + std::to_string(fits.size()) + " unmatched entries fit (" +
                              fits[0] + ", " + fits[1] + (fits.size() > 2 ? ", ..." : "") + ")");
  }
  return m;
}

std::string format_matches(const MatchResult& m, const std::vector<TensorInfo>& source,
                           const std::vector<TensorInfo>& target) {
  std::map<std::string, const NameMatch*> by_target;
  for (const auto& x : m.matched) by_target[x.target] = &x;
  std::map<std::string, TensorInfo> src_info;
  for (const auto& s : source) src_info[s.name] = s;
  size_t w = 10;
  for (const auto& t : target) w = std::max(w, t.name.size() + 2 + shape_str(t.shape).size());
  std::string out = "target (Kiln)";
  out.resize(w + 2, ' ');
  out += "source (file)\n";
  for (const auto& t : target) {
    std::string line = t.name + " " + shape_str(t.shape);
    line.resize(w + 2, ' ');
    auto it = by_target.find(t.name);
    if (it == by_target.end()) {
      line += "--- unmatched";
    } else {
      line += it->second->source + " " + shape_str(src_info[it->second->source].shape) + "  [" + it->second->how +
              (it->second->transpose ? ", transposed" : "") +
              (it->second->reshape ? ", reshaped from MindSpore's 2-D form" : "") + "]";
    }
    out += line + "\n";
  }
  out += std::to_string(m.matched.size()) + " of " + std::to_string(target.size()) + " matched";
  if (!m.unmatched_source.empty()) {
    out += "\nin the file, matching nothing (" + std::to_string(m.unmatched_source.size()) + "):";
    for (const auto& s : m.unmatched_source) out += "\n  " + s.name + " " + shape_str(s.shape);
  }
  if (!m.ignored.empty()) {
    out += "\nignored (" + std::to_string(m.ignored.size()) + "):";
    for (const auto& s : m.ignored) out += "\n  " + s;
  }
  if (!m.suggestions.empty()) {
    out += "\nsuggestions (write them as rename rules for kiln ckpt convert --map):";
    for (const auto& s : m.suggestions) out += "\n  " + s;
  }
  return out;
}

NamedTensors apply_matches(const MatchResult& m, const NamedTensors& source, const std::vector<TensorInfo>& target) {
  std::map<std::string, Tensor> by_name(source.begin(), source.end());
  std::map<std::string, DType> target_dtype;
  std::map<std::string, Shape> target_shape;
  for (const auto& t : target) target_dtype[t.name] = t.dtype, target_shape[t.name] = t.shape;
  NamedTensors out;
  for (const auto& x : m.matched) {
    Tensor t = by_name.at(x.source);
    if (x.transpose) t = t.t().contiguous();
    if (x.reshape) t = t.reshape(target_shape[x.target]);
    if (t.dtype() != target_dtype[x.target]) t = t.to(target_dtype[x.target]);
    out.emplace_back(x.target, t);
  }
  return out;
}

}  // namespace kiln::io

// MindSpore's parameter names and layouts, mapped to Kiln's. MindSpore's
// cells store the same tensors as Kiln's (Dense and convolution weights are
// [out, in, ...] in both, LSTM gates are i, f, g, o in both) under other
// names, with two layout differences: a 1-D convolution's weight is stored
// as the 2-D convolution it runs as, [out, in, 1, k], and an LSTM's
// tensors sit in lists (w_ih_list.K for layer K / directions, direction K %
// directions).
#include <algorithm>
#include <map>

#include "kiln/migrate.h"

namespace kiln::io {
namespace {

std::string module_of(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? "" : name.substr(0, dot + 1);
}

std::string last_part(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// The spelling rules: each MindSpore word for its Kiln word.
std::string respelled(const std::string& name) {
  static const std::map<std::string, std::string> words = {
      {"gamma", "weight"}, {"beta", "bias"}, {"moving_mean", "running_mean"},
      {"moving_variance", "running_var"}, {"embedding_table", "weight"}};
  std::string n = name;
  for (std::string::size_type at; (at = n.find(".cell_list.")) != std::string::npos;) n.erase(at, 10);
  if (n.rfind("cell_list.", 0) == 0) n.erase(0, 10);
  auto it = words.find(last_part(n));
  if (it != words.end()) n = module_of(n) + it->second;
  return n;
}

}  // namespace

bool is_mindspore_optimizer_state(const std::string& name) {
  static const char* const exact[] = {"global_step", "learning_rate", "beta1_power", "beta2_power", "epoch_num",
                                      "step_num", "loss_scale", "scale_sense", "current_iterator_step",
                                      "last_overflow_iterator_step"};
  for (const char* e : exact)
    if (name == e) return true;
  static const char* const prefixes[] = {"moments.", "moment1.", "moment2.", "accum.", "adam_m.", "adam_v.",
                                         "mean_grad.", "mean_square.", "linear.", "vhat."};
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

std::string kiln_name_for_mindspore(const std::string& name, const std::vector<TensorInfo>& targets) {
  // w_ih_list.K -> the K-th weight_ih_l* of the same module, in Kiln's
  // order (layer by layer, the reverse direction after the forward one).
  static const std::pair<const char*, const char*> lists[] = {
      {"w_ih_list", "weight_ih_l"}, {"w_hh_list", "weight_hh_l"}, {"b_ih_list", "bias_ih_l"}, {"b_hh_list", "bias_hh_l"}};
  for (const auto& [list, kiln] : lists) {
    const std::string marker = std::string(".") + list + ".";
    std::string::size_type at = ("." + name).find(marker);
    if (at == std::string::npos) continue;
    const std::string module = name.substr(0, at);  // "lstm." (with its dot) or ""
    const std::string index = name.substr(at + marker.size() - 1);
    if (index.empty() || index.size() > 6 || !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) break;
    size_t k = std::stoul(index), seen = 0;
    for (const auto& t : targets)
      if (t.name.rfind(module + kiln, 0) == 0 && t.name.find('.', module.size()) == std::string::npos &&
          seen++ == k)
        return t.name;
    break;
  }
  return respelled(name);
}

bool mindspore_layout_differs(const Shape& file, const Shape& target) {
  // A 1-D convolution's weight stored as a 2-D one: [out, in, 1, k] for [out, in, k].
  return file.size() == 4 && target.size() == 3 && file[2] == 1 && file[0] == target[0] && file[1] == target[1] &&
         file[3] == target[2];
}

}  // namespace kiln::io

#pragma once
// Weight migration: matching the names of a checkpoint from elsewhere (a
// PyTorch state dict) to a Kiln cell's, with every decision shown.
#include <regex>
#include <string>
#include <vector>

#include "kiln/io.h"
#include "kiln/nn.h"

namespace kiln::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::Float32;
  Shape shape;
};
std::vector<TensorInfo> infos_of(const NamedTensors& tensors);
// A cell's parameters and buffers in module order (each module's parameters,
// then its buffers), the order of a PyTorch state dict of the same network.
std::vector<TensorInfo> infos_of(const nn::Cell& cell);

// Ordered regex renames applied to source names, names (after renaming) whose
// 2-D tensor is transposed, and names to leave out. From YAML:
//   rename: [{from: '^features\.', to: ''}, ...]
//   transpose: ['^classifier\.weight$']
//   ignore: ['num_batches_tracked$']
struct RenameRules {
  std::vector<std::pair<std::string, std::string>> rename;
  std::vector<std::string> transpose, ignore;
};
RenameRules load_rename_rules(const std::string& path);

struct NameMatch {
  std::string source, target;
  std::string how;  // "same name", "rule", "MindSpore name", "similar name", "order and shape"
  bool transpose = false;
  bool reshape = false;  // a layout that differs only in its shape (MindSpore's 1-D convolutions)
};
struct MatchResult {
  std::vector<NameMatch> matched;
  std::vector<TensorInfo> unmatched_source, unmatched_target;
  std::vector<std::string> ignored;      // source names left out (rules, PyTorch bookkeeping)
  std::vector<std::string> suggestions;  // "target <- source?" for unmatched entries with a shape to go on
  bool complete() const { return unmatched_source.empty() && unmatched_target.empty(); }
};

// Matches in stages: rules, then same names, then MindSpore's names
// spelled the Kiln way (below), then names that agree once
// spelling is normalised (a "module." prefix, "layer" vs "layers"), then the
// remaining entries in order while their shapes agree. What is left is
// unmatched, with suggestions where exactly one shape fits.
MatchResult match_names(const std::vector<TensorInfo>& source, const std::vector<TensorInfo>& target,
                        const RenameRules& rules = {});
// MindSpore's names (gamma/beta/moving_mean/moving_variance of batch norm and
// layer norm, embedding_table, cell_list.N, an LSTM's w_ih_list.K) as the
// Kiln name among `targets`; names that need no change come back as they are.
std::string kiln_name_for_mindspore(const std::string& name, const std::vector<TensorInfo>& targets);
// Optimizer state and training bookkeeping in a MindSpore checkpoint
// (moments.*, global_step, learning_rate, beta1_power, ...): not weights.
bool is_mindspore_optimizer_state(const std::string& name);
// Whether a file's tensor of shape `file` holds a target of shape `target`
// in MindSpore's layout: a 1-D convolution's weight as [out, in, 1, k].
bool mindspore_layout_differs(const Shape& file, const Shape& target);

// Both lists side by side, then the unmatched, ignored and suggested entries.
std::string format_matches(const MatchResult& m, const std::vector<TensorInfo>& source,
                           const std::vector<TensorInfo>& target);
// The source tensors renamed (transposed, reshaped) to the matched target names.
NamedTensors apply_matches(const MatchResult& m, const NamedTensors& source, const std::vector<TensorInfo>& target);

}  // namespace kiln::io

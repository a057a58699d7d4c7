// Layout choice for convolution chains. oneDNN's convolutions run fastest
// on channel-blocked activations (nChw8c with AVX2); eager mode keeps every
// tensor in plain NCHW and pays a reorder on the way in and out of each
// convolution. Here, a convolution's output stays blocked when its channels
// allow, the ops between convolutions that can read blocked data do (pools,
// elementwise ops, and in training graphs the convolution and max-pool
// gradients), and a reorder is inserted only where something else reads the
// value. In inference graphs, a residual add (and a ReLU after it) is folded
// into the convolution that feeds it, accumulating into the shortcut's buffer.
// This file plans each node; layout_rewrite.cpp carries the plans out.
#include <algorithm>

#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/few_channel_conv.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "backends/cpu/passes/layout_pass.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/plain_pool.h"
#include "graph/derived_constants.h"
#include "graph/passes.h"
#include "kiln/autograd.h"
#include "ops/conv_attrs.h"

namespace kiln::graph {
namespace layout {

std::string layout_name(int block) { return block ? "nChw" + std::to_string(block) + "c" : std::string("nchw"); }

bool is_op(const Node& n, const char* name) { return n.is_op(name); }

bool fast(const cpu::onednn::LayoutCall& c) { return cpu::onednn::conv_layout_is_fast(c); }

namespace {

// Elementwise ops compute the same thing on any memory order of operands of
// the output's shape (kTagElementwise says so), so they run on blocked data
// as is. Only float32 results: blocked values are float32 and a reorder
// back to plain is too.
bool layout_free(const Graph& g, const Node& n) {
  return !n.removed && n.op && n.op->has_tag(kTagElementwise) && n.outputs.size() == 1 &&
         g.values[n.outputs[0]].meta.dtype == DType::Float32;
}

// The mean over H and W of an NCHW tensor (GlobalAveragePool, adaptive pooling to 1x1).
bool global_average(const Graph& g, const Node& n) {
  if (is_op(n, "adaptive_avg_pool2d")) {
    const Shape& y = g.values[n.outputs[0]].meta.shape;
    return y.size() == 4 && y[2] == 1 && y[3] == 1;
  }
  if (!is_op(n, "mean") || g.values[n.inputs[0]].meta.shape.size() != 4) return false;
  auto axes = n.attrs.get_ints("axes", {});
  return axes == std::vector<int64_t>{2, 3} || axes == std::vector<int64_t>{-2, -1};
}

// The gradient of global_average: gy [N, C, 1, 1] spread over H and W.
bool global_average_grad(const Graph& g, const Node& n) {
  if (!is_op(n, "adaptive_avg_pool2d_backward") || n.inputs.size() != 2) return false;
  const Shape& gy = g.values[n.inputs[0]].meta.shape;
  return gy.size() == 4 && gy[2] == 1 && gy[3] == 1 && g.values[n.outputs[0]].meta.dtype == DType::Float32;
}

// A linear layer after flatten(reorder to NCHW(x)) reads the blocked x
// directly, flattened in its own order, with the weight's columns permuted
// to match: the reorder disappears (the final dead-code pass drops it).
size_t read_flattened_blocked(Graph& g, const std::map<std::pair<int, int>, int>& copies, const std::vector<int>& block_of) {
  std::map<int, int> source_of;  // plain copy -> blocked value
  for (const auto& [from, copy] : copies)
    if (from.second == 0) source_of[copy] = from.first;
  auto uses = g.use_counts();
  size_t rewritten = 0;
  for (Node& n : g.nodes) {
    const bool linear = n.computes("linear") && !n.fused("fused_residual");
    if (!linear || n.inputs.size() < 2) continue;
    const int flat = n.inputs[0], w = n.inputs[1];
    const Value& fv = g.values[flat];
    if (fv.kind != ValueKind::Result || uses[flat] != 1 || g.values[w].kind != ValueKind::Constant) continue;
    Node& view = g.nodes[fv.producer];
    if (!is_op(view, "view") || fv.meta.shape.size() != 2) continue;
    auto it = source_of.find(view.inputs[0]);
    if (it == source_of.end() || uses[view.inputs[0]] != 1) continue;
    const Shape& x = g.values[it->second].meta.shape;  // [N, C, H, W]
    const int64_t block = block_of[it->second];
    const Tensor& weight = g.values[w].tensor;
    if (fv.meta.shape[0] != x[0] || weight.dim() != 2 || weight.shape()[1] != x[1] * x[2] * x[3]) continue;
    NoGradGuard no_grad;
    const int64_t o = weight.shape()[0];
    std::string kind = "columns of blocked [";
    for (int64_t d : {x[1], x[2], x[3], block}) kind.append(std::to_string(d)).append(" ");
    n.inputs[1] = add_derived_constant(g, w, kind, ".blocked", [&] {
      return weight.reshape({o, x[1] / block, block, x[2], x[3]}).permute({0, 1, 3, 4, 2}).contiguous().reshape(weight.shape());
    });
    view.inputs[0] = it->second;
    ++rewritten;
  }
  return rewritten;
}

cpu::onednn::ConvShape conv_shape(const Attrs& a, const Shape& x, const Shape& w, const Shape& y) {
  const Conv2dAttrs c = Conv2dAttrs::of(a);
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3], c.stride[0], c.stride[1], c.padding[0], c.padding[1],
          c.dilation[0], c.dilation[1], c.groups};
}

cpu::PoolWindow pool_window(const Attrs& a) { return cpu::PoolWindow::of(Pool2dAttrs::of(a)); }

}  // namespace

std::string LayoutPass::run() {
  if (block_ == 0) return "";
  uses_ = g_.use_counts();
  readers_.assign(g_.values.size(), {});
  for (size_t i = 0; i < g_.nodes.size(); ++i)
    if (!g_.nodes[i].removed)
      for (size_t k = 0; k < g_.nodes[i].inputs.size(); ++k)
        if (g_.nodes[i].inputs[k] >= 0) readers_[g_.nodes[i].inputs[k]].push_back({static_cast<int>(i), static_cast<int>(k)});
  block_of_.assign(g_.values.size(), 0);
  insert_after_.assign(g_.nodes.size(), {});
  for (size_t i = 0; i < g_.nodes.size(); ++i) plan_node(static_cast<int>(i));
  const size_t residuals = training_ ? 0 : fold_residuals();
  const size_t hard_activations = training_ ? 0 : fold_hard_activations();
  if (!training_) fuse_first_layer_pools();
  if (!training_) move_relus_past_pools();
  const size_t concats_in_place = training_ ? 0 : write_concats_in_place();
  fuse_pool_grads_into_first_layers();
  rewrite_nodes();
  insert_reorders();
  const size_t read_blocked = read_flattened_blocked(g_, copies_, block_of_);
  // The layouts chosen, in the IR: a later pass, a dump or a reader of the
  // graph sees which values are blocked.
  for (size_t id = 0; id < block_of_.size() && id < g_.values.size(); ++id)
    if (block_of_[id] != 0) g_.values[id].layout = layout_name(block_of_[id]);
  return summary(residuals, hard_activations, read_blocked, concats_in_place);
}

// The channel block a value would be held in: the machine's (16 with
// AVX-512), or 8 where the channels are a multiple of 8 only (MobileNet's
// 72, 88 and 120, ShuffleNet's 24), so those layers stay blocked too; 0
// when neither divides them.
int LayoutPass::block_for(int id) const {
  const TensorMeta& m = g_.values[id].meta;
  if (m.dtype != DType::Float32 || m.shape.size() != 4) return 0;
  if (m.shape[1] % block_ == 0) return block_;
  return block_ == 16 && m.shape[1] % 8 == 0 ? 8 : 0;
}

// Whether reader (node, input) can take the value blocked as it stands.
bool LayoutPass::reads_blocked_natively(int node, int k) const {
  const Node& m = g_.nodes[node];
  if (is_op(m, "conv2d") || is_op(m, "max_pool2d") || is_op(m, "conv2d_input_grad")) return k == 0;
  if (is_op(m, "conv2d_weight_grad")) return k <= 1;
  if (is_op(m, "max_pool2d_backward")) return k == 0 || k == 2;
  if (training_ && is_op(m, "batch_norm")) return k == 0;
  if (training_ && is_op(m, "batch_norm_backward")) return k <= 1;
  if (global_average_grad(g_, m)) return k == 1;  // (x only for its shape)
  return global_average(g_, m) || layout_free(g_, m);
}

// Whether a value with a choice of layout should be blocked. Inference
// graphs block every convolution output (the readers that cannot take it
// pay one reorder, as eager mode does inside the convolution). In training
// graphs the value must also be read by the backward pass, so it is blocked
// only when every reader takes it as it is: convolutions and their
// gradients, pools, batch norms and their gradients, elementwise ops (a
// ResNet's blocks stay blocked from end to end).
bool LayoutPass::wants_blocked(int id) const {
  if (!blockable(id)) return false;
  if (!training_) return true;
  if (std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end()) return false;
  for (auto [node, k] : readers_[id])
    if (!reads_blocked_natively(node, k)) return false;
  return true;
}

void LayoutPass::plan_node(int at) {
  Node& n = g_.nodes[at];
  if (n.removed) return;
  if (is_op(n, "conv2d")) return plan_conv(at);
  if (is_op(n, "conv2d_input_grad")) return plan_input_grad(at);
  if (is_op(n, "conv2d_weight_grad")) return plan_weight_grad(at);
  const int b0 = n.inputs.empty() || n.inputs[0] < 0 ? 0 : block_of_[n.inputs[0]];
  if (is_op(n, "max_pool2d") && b0 && indices_recomputable(n)) {
    Plan p{Plan::MaxPool};
    p.window = pool_window(n.attrs);
    p.block = b0;
    set(at, p, {b0});
    block_of_[n.outputs[0]] = b0;
  } else if (is_op(n, "avg_pool2d") && b0 && !training_) {  // (its gradient reads plain values)
    Plan p{Plan::AvgPool};
    p.window = pool_window(n.attrs);
    p.block = b0;
    p.count_include_pad = n.attrs.get_bool("count_include_pad", true);
    set(at, p, {b0});
    block_of_[n.outputs[0]] = b0;
  } else if (is_op(n, "max_pool2d_backward") && pools_.count(g_.values[n.inputs[1]].producer)) {
    plan_pool_grad(at);
  } else if (global_average(g_, n) && b0) {
    Plan p{Plan::GlobalAverage};
    p.block = b0;
    set(at, p, {b0});
  } else if (global_average_grad(g_, n) && block_of_[n.inputs[1]]) {
    Plan p{Plan::GlobalAverageGrad};  // gy is [N, C, 1, 1]: the same memory in either layout
    p.block = block_of_[n.inputs[1]];
    set(at, p, {0, p.block});
    block_of_[n.outputs[0]] = p.block;
  } else if (b0 && plan_batch_norm(at, b0)) {
  } else if (plan_batch_norm_grad(at)) {
  } else if (plan_channel_shuffle(at)) {  // planned, and its views removed, there
  } else if (b0 && plan_channel_affine(at, b0)) {
  } else if (b0 && blocked_slice(n, b0)) {
    Plan p{Plan::Slice};
    p.block = b0;
    p.start = n.attrs.get_int("start");
    set(at, p, {b0});
    block_of_[n.outputs[0]] = b0;
  } else if (b0 && blocked_interpolate(n)) {
    Plan p{Plan::Resize};
    p.block = b0;
    set(at, p, {b0});
    block_of_[n.outputs[0]] = b0;
  } else if (const int b = concat_block(n)) {
    Plan p{Plan::Concat};
    p.block = b;
    set(at, p, std::vector<int>(n.inputs.size(), b));
    block_of_[n.outputs[0]] = b;
  } else if (layout_free(g_, n)) {
    plan_elementwise(at);
  }
}

// An elementwise op whose inputs of the output's shape are all in one
// block runs on them as they are. Inputs that are one value per channel
// ([N, C, 1, 1]: a squeeze-and-excitation scale) are read as they stand
// (at 1x1 both layouts are the same memory) by a kernel that views all
// of them blocked (per_channel_elementwise_kernel).
void LayoutPass::plan_elementwise(int at) {
  const Node& n = g_.nodes[at];
  const Shape& shape = g_.values[n.outputs[0]].meta.shape;
  int block = -1;  // the one block every full-shaped input is in; 0 when they differ or one is plain
  std::vector<bool> per_channel(n.inputs.size(), false);
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const int id = n.inputs[k];
    if (id < 0 || numel_of(g_.values[id].meta.shape) == 1) continue;  // a scalar reads the same in any layout
    const Shape& s = g_.values[id].meta.shape;
    if (s != shape && shape.size() == 4 && s.size() == 4 && (s[0] == shape[0] || s[0] == 1) && s[1] == shape[1] &&
        s[2] == 1 && s[3] == 1 && (shape[2] != 1 || shape[3] != 1)) {
      per_channel[k] = true;
      continue;
    }
    const int b = s == shape ? block_of_[id] : 0;
    block = block < 0 || block == b ? b : 0;
  }
  if (block <= 0) return;
  block_of_[n.outputs[0]] = block;
  std::vector<int> reads;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const int id = n.inputs[k];
    if (id < 0 || numel_of(g_.values[id].meta.shape) == 1) reads.push_back(0);
    else reads.push_back(per_channel[k] ? block_of_[id] : block);
  }
  if (std::find(per_channel.begin(), per_channel.end(), true) == per_channel.end()) {
    reads_[at] = reads;
    return;
  }
  Plan p{Plan::PerChannel};
  p.block = block;
  p.per_channel = per_channel;
  set(at, p, reads);
}

// Inference: a batch norm (its statistics fixed) of blocked activations is
// a scale and shift per channel, run on them as they are, with the ReLU
// after it folded in: DenseNet's BN-ReLU-convolution layers, whose batch
// norms no convolution before them absorbs, so stay blocked from one
// convolution through the concatenation to the next.
bool LayoutPass::plan_channel_affine(int at, int block) {
  Node& n = g_.nodes[at];
  if (training_ || !is_op(n, "batch_norm") || n.attrs.get_bool("training", true) || n.inputs.size() < 5 ||
      n.inputs[3] < 0 || n.inputs[4] < 0 || g_.values[n.outputs[0]].meta.dtype != DType::Float32)
    return false;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (uses_[n.outputs[k]] != 0) return false;
  for (size_t k = 1; k < n.inputs.size(); ++k) {  // the kernel reads float32 parameters as they lie
    if (n.inputs[k] < 0) continue;
    const Value& v = g_.values[n.inputs[k]];
    if (v.meta.dtype != DType::Float32 || v.meta.shape.size() != 1) return false;
  }
  Plan p{Plan::ChannelAffine};
  p.block = block;
  n.outputs.resize(1);
  const int y = n.outputs[0];
  if (uses_[y] == 1 && readers_[y].size() == 1 && is_op(g_.nodes[readers_[y][0].first], "relu")) {
    Node& relu = g_.nodes[readers_[y][0].first];
    relu.removed = true;
    n.outputs[0] = relu.outputs[0];
    g_.values[n.outputs[0]].producer = at;
    p.relu = true;
  }
  set(at, p, {block, 0, 0, 0, 0});
  block_of_[n.outputs[0]] = block;
  return true;
}

// Float32 vectors of one value per channel (a batch norm's parameters and
// statistics), read as they lie.
static bool channel_vectors(const Graph& g, const Node& n, size_t first) {
  for (size_t k = first; k < n.inputs.size(); ++k) {
    if (n.inputs[k] < 0) continue;
    const Value& v = g.values[n.inputs[k]];
    if (v.meta.dtype != DType::Float32 || v.meta.shape.size() != 1) return false;
    if (v.tensor.defined() && !v.tensor.is_contiguous()) return false;
  }
  return true;
}

// Training: a batch norm of blocked activations takes its statistics and
// normalizes on them as they are (blocked_batch_norm.h). The ReLU after it,
// or a residual add and the ReLU after that, are folded in: a ResNet block's
// convolutions, batch norms, shortcut and ReLUs read and write no value
// through a reorder, and the normalized value before the ReLU, which
// nothing else reads, is never written.
bool LayoutPass::plan_batch_norm(int at, int block) {
  Node& n = g_.nodes[at];
  if (!training_ || !is_op(n, "batch_norm") || !n.attrs.get_bool("training", true) ||
      g_.values[n.outputs[0]].meta.dtype != DType::Float32 || !channel_vectors(g_, n, 1))
    return false;
  const bool mean_given = n.inputs.size() > 3 && n.inputs[3] >= 0, var_given = n.inputs.size() > 4 && n.inputs[4] >= 0;
  if (mean_given != var_given) return false;  // (the plain kernel updates neither then)
  n.inputs.resize(5, -1);
  Plan p{Plan::BatchNorm};
  p.block = block;
  const int y = fold_into_batch_norm(n.outputs[0], p, at);
  n.outputs[0] = y;
  g_.values[y].producer = at;
  std::vector<int> reads = {block, 0, 0, 0, 0};
  if (p.residual >= 0) {
    n.inputs.push_back(p.residual);
    reads.push_back(block);
  }
  set(at, p, reads);
  block_of_[y] = block;
  return true;
}

// The value a blocked training batch norm at `at` writes: its own result, or
// that of the ops it takes over (in p): a ReLU reading it alone, or an add of
// a blocked shortcut computed before it and the ReLU after that add.
int LayoutPass::fold_into_batch_norm(int y, Plan& p, int at) {
  auto sole_reader = [&](int id) -> Node* {
    return uses_[id] == 1 && readers_[id].size() == 1 ? &g_.nodes[readers_[id][0].first] : nullptr;
  };
  Node* next = sole_reader(y);
  if (next && is_op(*next, "add") && next->inputs.size() == 2) {
    const int other = next->inputs[0] == y ? next->inputs[1] : next->inputs[0];
    const Value& o = g_.values[other];
    const bool before = o.kind != ValueKind::Result || o.producer < at;
    if (other != y && before && block_of_[other] == p.block && o.meta.shape == g_.values[y].meta.shape &&
        o.meta.dtype == DType::Float32) {
      next->removed = true;
      p.residual = other;
      y = next->outputs[0];
      next = sole_reader(y);
    }
  }
  if (next && is_op(*next, "relu")) {
    next->removed = true;
    p.relu = true;
    y = next->outputs[0];
  }
  return y;
}

// Training: the gradient of a blocked batch norm, on the blocked gradient
// and input; a ReLU's backward that only it reads (the layer's gy) is
// folded in, as a mask on gy.
bool LayoutPass::plan_batch_norm_grad(int at) {
  Node& n = g_.nodes[at];
  if (!training_ || !is_op(n, "batch_norm_backward") || !n.attrs.get_bool("training", true)) return false;
  const int block = block_of_[n.inputs[1]];
  if (!block || g_.values[n.outputs[0]].meta.dtype != DType::Float32 || !channel_vectors(g_, n, 2)) return false;
  Plan p{Plan::BatchNormGrad};
  p.block = block;
  std::vector<int> reads = {block, block, 0, 0, 0};
  const Value& gy = g_.values[n.inputs[0]];
  if (gy.kind == ValueKind::Result && uses_[n.inputs[0]] == 1) {
    Node& relu_grad = g_.nodes[gy.producer];
    if (is_op(relu_grad, "relu_backward") && block_of_[relu_grad.inputs[0]] == block &&
        block_of_[relu_grad.inputs[1]] == block && reads_.count(gy.producer) && !plans_.count(gy.producer)) {
      relu_grad.removed = true;
      reads_.erase(gy.producer);
      n.inputs[0] = relu_grad.inputs[0];
      p.mask = relu_grad.inputs[1];
      n.inputs.push_back(p.mask);
      reads.push_back(block);
    }
  }
  set(at, p, reads);
  block_of_[n.outputs[0]] = block;
  return true;
}

// Inference: an upsampling (or other resize) of blocked activations runs on
// them as they are, so the convolutions and concatenation around it (a
// U-Net's decoder) need no reorder. tf_crop_and_resize, which can map a
// position outside the input, stays plain.
bool LayoutPass::blocked_interpolate(const Node& n) const {
  return !training_ && is_op(n, "interpolate") && n.inputs.size() == 1 &&
         n.attrs.get_string("coordinates", "half_pixel") != "tf_crop_and_resize" &&
         g_.values[n.outputs[0]].meta.dtype == DType::Float32;
}

// Inference: channels of blocked values, each a whole number of blocks of
// one size, concatenate as blocks (SqueezeNet's and Inception's branches
// meet so); a plain part (DenseNet's block input, from an average pool) is
// reordered to the block once, however many concatenations read it. The
// block, or 0.
int LayoutPass::concat_block(const Node& n) const {
  if (training_ || !is_op(n, "concat") || n.inputs.size() < 2) return 0;
  const TensorMeta& y = g_.values[n.outputs[0]].meta;
  const int64_t axis = n.attrs.get_int("axis", 0);
  if (y.dtype != DType::Float32 || y.shape.size() != 4 || (axis != 1 && axis != -3)) return 0;
  int b = 0;  // the block of the first blocked part; the others are reordered to it once each
  for (int id : n.inputs)
    if (id >= 0 && block_of_[id] != 0 && b == 0) b = block_of_[id];
  for (int id : n.inputs)
    if (id < 0 || b == 0 || g_.values[id].meta.shape[1] % b != 0) return 0;
  return b;
}

// Inference: x [N, C, H, W] viewed as [N, g, C / g, H, W], transposed to
// [N, C / g, g, H, W], copied and viewed as [N, C, H, W] again (a channel
// shuffle, as exported from ShuffleNet), with x blocked: the copy becomes
// one pass from blocked x to a blocked result, and the views go. It reads
// the parts of a blocked concatenation that made x, and writes the
// channel slices that are all that read the result, in place of both.
bool LayoutPass::plan_channel_shuffle(int at) {
  Node& copy = g_.nodes[at];
  if (training_ || !is_op(copy, "copy")) return false;
  auto only_reader = [&](int id) -> Node* {
    if (uses_[id] != 1 || readers_[id].size() != 1) return nullptr;
    return &g_.nodes[readers_[id][0].first];
  };
  auto producer = [&](int id) -> Node* {
    const Value& v = g_.values[id];
    return v.kind == ValueKind::Result && uses_[id] == 1 ? &g_.nodes[v.producer] : nullptr;
  };
  Node* permute = producer(copy.inputs[0]);
  if (!permute || !is_op(*permute, "permute") || permute->attrs.get_ints("order", {}) != std::vector<int64_t>{0, 2, 1, 3, 4})
    return false;
  Node* split = producer(permute->inputs[0]);
  Node* merge = only_reader(copy.outputs[0]);
  if (!split || !merge || !is_op(*split, "view") || !is_op(*merge, "view")) return false;
  const int x = split->inputs[0], y = merge->outputs[0];
  const Shape &xs = g_.values[x].meta.shape, &grouped = g_.values[split->outputs[0]].meta.shape;
  if (!block_of_[x] || g_.values[y].meta.shape != xs || grouped.size() != 5 || grouped[0] != xs[0] ||
      grouped[1] * grouped[2] != xs[1] || grouped[3] != xs[2] || grouped[4] != xs[3])
    return false;
  Plan p{Plan::Shuffle};
  p.block = block_of_[x];
  p.groups = grouped[1];
  split->removed = permute->removed = merge->removed = true;
  copy.inputs = concatenated_parts(x, p.groups);
  copy.outputs = channel_slices(y, p.block);
  for (size_t j = 0; j < copy.outputs.size(); ++j) {
    g_.values[copy.outputs[j]].producer = at;
    g_.values[copy.outputs[j]].output_index = static_cast<int>(j);
    block_of_[copy.outputs[j]] = p.block;
  }
  set(at, p, std::vector<int>(copy.inputs.size(), p.block));
  return true;
}

// The inputs of the blocked concatenation of `groups` equal parts that
// makes x, read by nothing else (the concatenation goes); else x.
std::vector<int> LayoutPass::concatenated_parts(int x, int64_t groups) {
  const Value& v = g_.values[x];
  if (v.kind != ValueKind::Result || uses_[x] != 1) return {x};
  auto plan = plans_.find(v.producer);
  Node& concat = g_.nodes[v.producer];
  if (plan == plans_.end() || plan->second.kind != Plan::Concat || static_cast<int64_t>(concat.inputs.size()) != groups)
    return {x};
  for (int part : concat.inputs)
    if (g_.values[part].meta.shape[1] * groups != v.meta.shape[1]) return {x};
  concat.removed = true;
  plans_.erase(plan);
  reads_.erase(v.producer);
  return concat.inputs;
}

// The blocked channel slices that cover y in order and are all that read
// it (they go; y is never made); else y.
std::vector<int> LayoutPass::channel_slices(int y, int block) {
  if (uses_[y] != static_cast<int>(readers_[y].size())) return {y};  // a graph output too
  std::vector<std::pair<int64_t, int>> slices;  // (start, node)
  for (auto [node, k] : readers_[y]) {
    const Node& s = g_.nodes[node];
    if (!blocked_slice(s, block)) return {y};
    slices.push_back({s.attrs.get_int("start"), node});
  }
  std::sort(slices.begin(), slices.end());
  int64_t next = 0;
  for (auto [start, node] : slices) {
    if (start != next) return {y};
    next += g_.values[g_.nodes[node].outputs[0]].meta.shape[1];
  }
  if (slices.empty() || next != g_.values[y].meta.shape[1]) return {y};
  std::vector<int> outputs;
  for (auto [start, node] : slices) {
    g_.nodes[node].removed = true;
    outputs.push_back(g_.nodes[node].outputs[0]);
  }
  return outputs;
}

// Inference: channels [start, end) of a blocked value, both on block
// boundaries (ShuffleNet splits its channels in halves so).
bool LayoutPass::blocked_slice(const Node& n, int block) const {
  if (training_ || !is_op(n, "slice")) return false;
  const Shape &x = g_.values[n.inputs[0]].meta.shape, &y = g_.values[n.outputs[0]].meta.shape;
  const int64_t axis = n.attrs.get_int("axis", 0), start = n.attrs.get_int("start", 0);
  return (axis == 1 || axis == -3) && n.attrs.get_int("step", 1) == 1 && start >= 0 && start % block == 0 &&
         y[1] % block == 0 && start + y[1] <= x[1];
}

// A blocked pool writes no argmax indices: its gradient finds the maxima
// again in the pool's input, so every reader of the indices must be a
// max-pool gradient.
bool LayoutPass::indices_recomputable(const Node& n) const {
  for (auto [node, k] : readers_[n.outputs[1]])
    if (!is_op(g_.nodes[node], "max_pool2d_backward") || k != 1) return false;
  return true;
}

void LayoutPass::plan_conv(int at) {
  Node& n = g_.nodes[at];
  const int x = n.inputs[0], y = n.outputs[0];
  if (g_.values[x].meta.dtype != DType::Float32) return;
  Plan p{Plan::Conv};
  p.call.shape = conv_shape(n.attrs, g_.values[x].meta.shape, g_.values[n.inputs[1]].meta.shape, g_.values[y].meta.shape);
  p.call.src_block = block_of_[x];
  p.call.dst_block = wants_blocked(y) ? block_for(y) : 0;
  p.call.relu = n.attrs.get_string("activation", "none") == "relu";
  p.call.bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
  if (p.call.src_block == 0 && p.call.dst_block == 0) return;
  const bool own = own_kernels(n) && own_kernel_applies(p.call);
  if (!own && !fast(p.call) && !fast_variant(p.call, x, y)) return;  // stays a plain convolution
  // Blocks smaller than the machine's pay off for some layers only, on
  // oneDNN's kernels. (Kiln's 1x1 kernel runs alike in both block sizes.)
  const bool small_block = (p.call.src_block != 0 && p.call.src_block < block_) ||
                           (p.call.dst_block != 0 && p.call.dst_block < block_);
  if (small_block && !own && !training_ && p.call.kind == cpu::onednn::ConvPass::Forward && timed_ &&
      !cpu::blocked_beats_plain(p.call))
    return;
  std::vector<int> reads{p.call.src_block, 0};
  if (p.call.bias) reads.push_back(0);
  set(at, p, reads);
  block_of_[y] = p.call.dst_block;
}

// Whether an inference convolution may run on Kiln's own kernels (Winograd,
// the patch GEMM): their weights are transformed once, so they must be
// constant, and the choice among them is timed.
bool LayoutPass::own_kernels(const Node& conv) const {
  return !training_ && timed_ && g_.values[conv.inputs[1]].kind == ValueKind::Constant;
}

// Whether a call runs fast on blocked layouts: on oneDNN's kernel, or on
// Kiln's patch GEMM or depthwise kernel (grouped ones too: oneDNN's kernels
// run groups of under 16 channels slowly) where the convolution may use them.
bool LayoutPass::runs_fast(const cpu::onednn::LayoutCall& call, const Node& conv) const {
  return fast(call) || (own_kernels(conv) && own_kernel_applies(call));
}

bool own_kernel_applies(const cpu::onednn::LayoutCall& call) {
  return cpu::patch_gemm_applies(call) || cpu::blocked_depthwise_applies(call);
}

// A layout oneDNN runs fast, when the planned one is not: oneDNN has fast
// kernels for plain sources only with few channels (a first layer), and
// none from one block size to another, so the source is reordered to a
// block, or else the output takes the source's block, where the channels
// allow.
bool LayoutPass::fast_variant(cpu::onednn::LayoutCall& call, int x, int y) const {
  const int64_t xc = g_.values[x].meta.shape[1], yc = g_.values[y].meta.shape[1];
  std::vector<std::pair<int, int>> tries;  // (src block, dst block)
  if (call.src_block == 0 && blockable(x)) tries.push_back({block_for(x), call.dst_block});
  if (call.src_block != 0 && call.dst_block != 0 && call.src_block != call.dst_block) {
    // Reordering the source first: the output's block is the one its
    // channels allow, so a smaller one does not spread to the layers after.
    if (xc % call.dst_block == 0) tries.push_back({call.dst_block, call.dst_block});
    if (yc % call.src_block == 0) tries.push_back({call.src_block, call.src_block});
  }
  if (call.src_block == 0 && call.dst_block != 0 && xc % call.dst_block == 0) tries.push_back({call.dst_block, call.dst_block});
  for (auto [src, dst] : tries) {
    cpu::onednn::LayoutCall c = call;
    c.src_block = src;
    c.dst_block = dst;
    if (fast(c)) {
      call = c;
      return true;
    }
  }
  return false;
}

void LayoutPass::plan_input_grad(int at) {
  Node& n = g_.nodes[at];
  const int gy = n.inputs[0], gx = n.outputs[0];
  if (!block_of_[gy] || !wants_blocked(gx)) return;
  Plan p{Plan::InputGrad};
  p.call.kind = cpu::onednn::ConvPass::BackwardData;
  p.call.shape = conv_shape(n.attrs, n.attrs.get_ints("input_shape", {}), g_.values[n.inputs[1]].meta.shape,
                            g_.values[gy].meta.shape);
  p.call.src_block = block_for(gx);
  p.call.dst_block = block_of_[gy];
  if (!fast(p.call)) return;
  set(at, p, {p.call.dst_block, 0});
  block_of_[gx] = p.call.src_block;
}

void LayoutPass::plan_weight_grad(int at) {
  Node& n = g_.nodes[at];
  const int x = n.inputs[0], gy = n.inputs[1];
  if (!block_of_[gy]) return;
  Plan p{Plan::WeightGrad};
  p.call.kind = cpu::onednn::ConvPass::BackwardWeights;
  p.call.shape = conv_shape(n.attrs, g_.values[x].meta.shape, n.attrs.get_ints("weight_shape", {}), g_.values[gy].meta.shape);
  p.call.bias = n.attrs.get_bool("with_bias", false);
  p.call.dst_block = block_of_[gy];
  p.call.src_block = block_of_[x];
  if (p.call.src_block == 0 && cpu::few_channel_weight_grad_applies(p.call.shape, p.call.dst_block)) {
    p.few_channels = true;
  } else if (!fast(p.call)) {
    return;
  }
  set(at, p, {p.call.src_block, p.call.dst_block});
}

void LayoutPass::plan_pool_grad(int at) {
  Node& n = g_.nodes[at];
  const int pool = g_.values[n.inputs[1]].producer;
  Plan p{Plan::MaxPoolGrad};
  p.window = plans_.at(pool).window;
  p.block = plans_.at(pool).block;
  p.gy_block = block_of_[n.inputs[0]];
  // The node now reads (gy, the pool's input, [mask]) instead of (gy, indices, [mask]).
  n.inputs[1] = g_.nodes[pool].inputs[0];
  std::vector<int> reads{p.gy_block, p.block};
  if (n.inputs.size() > 2) reads.push_back(p.block);
  set(at, p, reads);
  block_of_[n.outputs[0]] = p.block;
}

void LayoutPass::set(int at, const Plan& p, std::vector<int> reads) {
  plans_.emplace(at, p);
  reads_[at] = std::move(reads);
  if (p.kind == Plan::MaxPool) pools_.insert(at);
}

}  // namespace layout

std::string pool_values_only(Graph& g) {
  auto uses = g.use_counts();
  size_t rewritten = 0;
  for (Node& n : g.nodes) {
    if (!layout::is_op(n, "max_pool2d") || n.outputs.size() < 2 || uses[n.outputs[1]] != 0) continue;
    const Value& x = g.values[n.inputs[0]];
    const DType dtype = x.meta.dtype;
    if ((dtype != DType::Float32 && dtype != DType::UInt8 && dtype != DType::Int8) || x.meta.shape.size() != 4) continue;
    const cpu::PoolWindow window = layout::pool_window(n.attrs);
    Node k;
    k.inputs = {n.inputs[0]};
    k.outputs = {n.outputs[0]};
    k.label = "max_pool2d (values)";
    k.fused_from = n.op;  // the int8 layout pass may run it channels-last (int8_layouts.cpp)
    k.attrs = n.attrs;
    k.custom = [window, dtype](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      const Shape &xs = in[0].shape(), &ys = out[0].shape();
      const Tensor src = in[0].contiguous();
      const int64_t planes = xs[0] * xs[1];
      if (dtype == DType::UInt8)
        cpu::max_pool_values(src.data<uint8_t>(), out[0].data<uint8_t>(), planes, xs[2], xs[3], ys[2], ys[3], window);
      else if (dtype == DType::Int8)
        cpu::max_pool_values(src.data<int8_t>(), out[0].data<int8_t>(), planes, xs[2], xs[3], ys[2], ys[3], window);
      else
        cpu::max_pool_values(src.data<float>(), out[0].data<float>(), planes, xs[2], xs[3], ys[2], ys[3], window);
    };
    n = std::move(k);
    ++rewritten;
  }
  return rewritten ? std::to_string(rewritten) + " max pools on plain data without indices" : "";
}

std::string choose_conv_layouts(Graph& g, const PassOptions& options) {
  return layout::LayoutPass(g, false, options.timed_choices, options.dynamic_batch).run();
}
std::string choose_training_conv_layouts(Graph& g, const PassOptions& options) {
  return layout::LayoutPass(g, true, options.timed_choices, false).run();
}

}  // namespace kiln::graph

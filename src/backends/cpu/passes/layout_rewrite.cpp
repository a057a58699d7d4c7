// The convolution layout pass, second half: residual adds, hard
// activations, first-layer pools and concatenations folded into the planned
// convolutions, then each planned node rewritten as its kernel and the
// reorders inserted where a reader takes another layout than its value's.
#include <algorithm>

#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/few_channel_conv.h"
#include "backends/cpu/passes/layout_kernels.h"
#include "backends/cpu/passes/layout_pass.h"
#include "backends/cpu/patch_gemm_conv.h"
#include "backends/cpu/winograd_conv.h"
#include "graph/derived_constants.h"
#include "kiln/autograd.h"

namespace kiln::graph::layout {

// Residual adds (and a ReLU after them) fold into the convolution that feeds them.
size_t LayoutPass::fold_residuals() {
  size_t folded = 0;
  for (auto& [at, plan] : plans_) {
    if (plan.kind != Plan::Conv) continue;
    Node& conv = g_.nodes[at];
    const int y = conv.outputs[0];
    if (plan.call.relu || plan.call.dst_block == 0 || uses_[y] != 1) continue;
    Node* add = nullptr;
    for (Node& m : g_.nodes)
      if (is_op(m, "add") && (m.inputs[0] == y || m.inputs[1] == y)) add = &m;
    if (!add) continue;
    const int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
    if (other == y || block_of_[other] != plan.call.dst_block || g_.values[other].meta.shape != g_.values[y].meta.shape)
      continue;
    if (g_.values[other].kind == ValueKind::Result && g_.values[other].producer > at) continue;  // not computed yet
    cpu::onednn::LayoutCall with = plan.call;
    with.residual = true;
    with.relu = true;
    const bool relu_fast = runs_fast(with, conv);
    with.relu = false;
    if (!relu_fast && !runs_fast(with, conv)) continue;
    int result = add->outputs[0];
    add->removed = true;
    Node* relu = nullptr;
    if (uses_[result] == 1)
      for (Node& m : g_.nodes)
        if (is_op(m, "relu") && m.inputs[0] == result) relu = &m;
    if (relu && relu_fast) {
      result = relu->outputs[0];
      relu->removed = true;
      plan.call.relu = true;
    }
    plan.call.residual = true;
    plan.residual = other;
    conv.outputs[0] = result;
    block_of_[result] = plan.call.dst_block;
    ++folded;
  }
  return folded;
}

// The convolution at `at` takes over `nodes` (the ops after it, in order),
// computing them as `with` says, and writes the last one's output.
void LayoutPass::absorb(int at, Plan& plan, const cpu::onednn::LayoutCall& with, std::initializer_list<int> nodes) {
  plan.call = with;
  const int result = g_.nodes[*(nodes.end() - 1)].outputs[0];
  for (int node : nodes) {
    g_.nodes[node].removed = true;
    reads_.erase(node);
  }
  g_.nodes[at].outputs[0] = result;
  g_.values[result].producer = at;
  block_of_[result] = plan.call.dst_block;
}

// Inference: y * sigmoid(y) (SiLU, as exported: a sigmoid and a product;
// or the silu op) over a blocked convolution's output y, read by nothing
// else, becomes the primitive's swish post-op (EfficientNet has one after
// most convolutions).
bool LayoutPass::fold_silu(int at, Plan& plan) {
  Node& conv = g_.nodes[at];
  const int y = conv.outputs[0];
  cpu::onednn::LayoutCall with = plan.call;
  with.swish = true;
  if (uses_[y] == 1 && readers_[y].size() == 1 && is_op(g_.nodes[readers_[y][0].first], "silu")) {
    if (!runs_fast(with, conv)) return false;
    absorb(at, plan, with, {readers_[y][0].first});
    return true;
  }
  if (uses_[y] != 2 || readers_[y].size() != 2) return false;
  int sigmoid = -1, product = -1;
  for (auto [node, k] : readers_[y]) {
    if (is_op(g_.nodes[node], "sigmoid")) sigmoid = node;
    else if (is_op(g_.nodes[node], "mul")) product = node;
  }
  if (sigmoid < 0 || product < 0) return false;
  const int s = g_.nodes[sigmoid].outputs[0];
  const Node& mul = g_.nodes[product];
  if (uses_[s] != 1 || !((mul.inputs[0] == y && mul.inputs[1] == s) || (mul.inputs[0] == s && mul.inputs[1] == y)))
    return false;
  if (!runs_fast(with, conv)) return false;
  absorb(at, plan, with, {sigmoid, product});
  return true;
}

// Inference: a clamp from 0 to a positive cap (ReLU6, MobileNetV2's
// activation, exported as Clip(0, 6)) read only from a blocked
// convolution's output becomes its ReLU and cap, in the epilogue of the
// patch GEMM or in the pass after oneDNN's kernel that applies the ReLU
// there, so the activations are written once (a clamp on its own was 14% of
// MobileNetV2's time). Not after Winograd, whose epilogue has no cap.
bool LayoutPass::fold_relu6(int at, Plan& plan, Node& clamp) {
  if (clamp.removed || !is_op(clamp, "clamp") || !clamp.attrs.has("min") || !clamp.attrs.has("max")) return false;
  const double lo = clamp.attrs.get_float("min"), hi = clamp.attrs.get_float("max");
  if (lo != 0.0 || !(hi > 0.0)) return false;
  Node& conv = g_.nodes[at];
  cpu::onednn::LayoutCall with = plan.call;
  with.relu = true;
  with.cap = static_cast<float>(hi);
  const cpu::ConvAlgorithm algorithm = chosen_algorithm(plan, conv);
  if (!runs_fast(with, conv) || algorithm == cpu::ConvAlgorithm::Winograd2x2 ||
      algorithm == cpu::ConvAlgorithm::Winograd4x4)
    return false;
  absorb(at, plan, with, {readers_[conv.outputs[0]][0].first});
  return true;
}

// Inference: a hard-swish or hard-sigmoid read only from a blocked
// convolution's output becomes that primitive's post-op (MobileNetV3 has a
// hard-swish after most of its convolutions and a hard-sigmoid after each
// squeeze-and-excitation), so the activations are written once.
size_t LayoutPass::fold_hard_activations() {
  size_t folded = 0;
  for (auto& [at, plan] : plans_) {
    if (plan.kind != Plan::Conv || plan.call.relu || plan.call.residual || plan.call.dst_block == 0) continue;
    Node& conv = g_.nodes[at];
    const int y = conv.outputs[0];
    if (fold_silu(at, plan)) {
      ++folded;
      continue;
    }
    if (uses_[y] != 1 || readers_[y].size() != 1) continue;
    Node& hs = g_.nodes[readers_[y][0].first];
    if (fold_relu6(at, plan, hs)) {
      ++folded;
      continue;
    }
    if (hs.removed || !(is_op(hs, "hardswish") || is_op(hs, "hardsigmoid"))) continue;
    const bool swish = is_op(hs, "hardswish");
    cpu::onednn::LayoutCall with = plan.call;
    (swish ? with.hardswish : with.hardsigmoid) = true;
    // A hard-sigmoid (after a squeeze-and-excitation, on a [N, C, 1, 1]
    // vector) costs little on its own, so it is not folded where Winograd
    // or a patch GEMM beats oneDNN's kernel, whose epilogues lack it: those
    // 1x1 convolutions took twice as long on oneDNN. A hard-swish on a
    // whole feature map is worth folding in any case.
    if (!runs_fast(with, conv) || (!swish && chosen_algorithm(plan, conv) != cpu::ConvAlgorithm::Direct)) continue;
    absorb(at, plan, with, {readers_[y][0].first});
    ++folded;
  }
  return folded;
}

// Inference, one image: a blocked concatenation of convolution and
// interpolation outputs is written in place. Each channel block range of
// the result is contiguous, so each part writes its own range, the first
// into a new buffer of the result's size and each later one into the
// buffer it takes over from the one before (SqueezeNet's fire modules,
// U-Net's upsampled features and skip connections). A part read elsewhere
// too (U-Net's skip connection, which its max pool reads) is read there
// as a view of its range of the buffer.
size_t LayoutPass::write_concats_in_place() {
  size_t written = 0;
  for (auto it = plans_.begin(); it != plans_.end();) {
    const auto [at, plan] = *it;
    Node& concat = g_.nodes[at];
    struct Part {
      int node;
      int64_t first;  // its first channel
      int value;      // what it made
    };
    std::vector<Part> parts;
    int64_t channel = 0;
    bool ok = plan.kind == Plan::Concat && g_.values[concat.outputs[0]].meta.shape[0] == 1;
    for (int id : concat.inputs) {
      if (!ok) break;
      const Value& v = g_.values[id];
      auto part = v.kind == ValueKind::Result ? plans_.find(v.producer) : plans_.end();
      const bool graph_output = std::find(g_.outputs.begin(), g_.outputs.end(), id) != g_.outputs.end();
      ok = part != plans_.end() && g_.nodes[v.producer].outputs.size() == 1 && !graph_output &&
           std::count(concat.inputs.begin(), concat.inputs.end(), id) == 1 &&
           ((part->second.kind == Plan::Conv && !part->second.pooled && part->second.residual < 0 &&
             part->second.call.dst_block == plan.block) ||
            (part->second.kind == Plan::Resize && part->second.block == plan.block));
      if (ok) parts.push_back({v.producer, channel, id});
      channel += v.meta.shape[1];
    }
    if (!ok) {
      ++it;
      continue;
    }
    std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.node < b.node; });
    int previous = -1;
    for (size_t i = 0; i < parts.size(); ++i) {
      Node& producer = g_.nodes[parts[i].node];
      Plan& c = plans_.at(parts[i].node);
      int result = concat.outputs[0];
      if (i + 1 < parts.size()) {
        Value v;
        v.meta = g_.values[result].meta;
        result = g_.add_value(std::move(v));
        block_of_.push_back(plan.block);
      }
      if (uses_[parts[i].value] > 1) view_concat_part(parts[i].value, at, result, parts[i].first);
      producer.outputs = {result};
      g_.values[result].producer = parts[i].node;
      c.concat_at = parts[i].first;
      c.carry = previous;
      previous = result;
    }
    concat.removed = true;
    reads_.erase(at);
    it = plans_.erase(it);
    ++written;
  }
  return written;
}

// The readers of `part` other than the concatenation `concat` read it as a
// view of its channels [first, ...) of `whole`, right after it is made.
void LayoutPass::view_concat_part(int part, int concat, int whole, int64_t first) {
  const int producer = g_.values[part].producer;
  const int64_t channels = g_.values[part].meta.shape[1];
  Value v;
  v.meta = g_.values[part].meta;
  v.producer = producer;  // (the splice sets it to the view's own node; a reorder of it goes after that)
  const int view = g_.add_value(std::move(v));
  block_of_.push_back(block_of_[part]);
  Node slice;
  slice.op = &OpRegistry::instance().get("slice");
  slice.attrs = {{"axis", int64_t{1}}, {"start", first}, {"end", first + channels}, {"step", int64_t{1}}};
  slice.inputs = {whole};
  slice.outputs = {view};
  insert_after_[producer].push_back(std::move(slice));
  for (auto [node, k] : readers_[part])
    if (node != concat) g_.nodes[node].inputs[k] = view;
}

// Inference: a first layer with few input channels, a ReLU and a 2x2 max
// pool after it run as one kernel that writes only the pooled output.
void LayoutPass::fuse_first_layer_pools() {
  for (auto& [at, plan] : plans_) {
    if (plan.kind != Plan::MaxPool) continue;
    const Value& x = g_.values[g_.nodes[at].inputs[0]];
    if (x.kind != ValueKind::Result || uses_[g_.nodes[at].inputs[0]] != 1) continue;
    auto conv = plans_.find(x.producer);
    if (conv == plans_.end() || conv->second.kind != Plan::Conv) continue;
    Plan& c = conv->second;
    if (c.call.src_block != 0 || !c.call.relu || c.call.cap > 0 || c.call.residual || c.call.dst_block != block_ ||
        g_.nodes[at].attrs.get_bool("ceil_mode", false) || !cpu::conv_relu_pool_applies(c.call.shape, block_, plan.window))
      continue;
    c.pooled = true;
    g_.nodes[x.producer].outputs = g_.nodes[at].outputs;
    g_.values[g_.nodes[at].outputs[0]].producer = x.producer;
    g_.nodes[at].removed = true;
  }
  drop_removed_plans();
}

void LayoutPass::drop_removed_plans() {
  for (auto it = plans_.begin(); it != plans_.end();)
    it = g_.nodes[it->first].removed ? plans_.erase(it) : std::next(it);
}

// Inference: the ReLU of a convolution whose output only a max pool reads
// runs on the pool's output instead (max and ReLU commute), a quarter of
// the values for a 2x2 pool: after oneDNN's kernel the ReLU is a pass of
// its own (its post-op would turn NaN into 0). Not with a cap (ReLU6).
void LayoutPass::move_relus_past_pools() {
  for (auto& [at, plan] : plans_) {
    if (plan.kind != Plan::MaxPool) continue;
    const int x = g_.nodes[at].inputs[0];
    if (g_.values[x].kind != ValueKind::Result || uses_[x] != 1) continue;
    auto conv = plans_.find(g_.values[x].producer);
    if (conv == plans_.end() || conv->second.kind != Plan::Conv || conv->second.pooled || !conv->second.call.relu ||
        conv->second.call.cap > 0 || conv->second.concat_at >= 0)
      continue;
    conv->second.call.relu = false;
    plan.relu = true;
  }
}

// Inference: a 2x2, stride-2 max pool that alone reads a convolution's
// output, which Winograd can take into its output transform (tiles of 2x2
// and 4x4 hold whole windows) and write only the pooled quarter: the pool's
// pass over the full output goes (the W2 CNN's second one took 20 of 380 us
// at batch 16). The pool's node, or -1.
int LayoutPass::winograd_pool(const Plan& plan, const Node& k) const {
  const int y = k.outputs[0];
  if (training_ || plan.concat_at >= 0 || plan.call.residual || plan.call.swish || uses_[y] != 1 ||
      readers_[y].size() != 1)
    return -1;
  const int reader = readers_[y][0].first;
  auto pool = plans_.find(reader);
  const Node& p = g_.nodes[reader];
  if (pool == plans_.end() || pool->second.kind != Plan::MaxPool || p.removed || p.inputs[0] != y ||
      pool->second.block != plan.call.dst_block || p.attrs.get_bool("ceil_mode", false))
    return -1;
  const cpu::PoolWindow& w = pool->second.window;
  const bool two_by_two =
      w.kh == 2 && w.kw == 2 && w.sh == 2 && w.sw == 2 && w.ph == 0 && w.pw == 0 && w.dh == 1 && w.dw == 1;
  return two_by_two ? reader : -1;
}

// The convolution k writes the output of that pool, with the ReLU that
// had moved onto the pool, and is named for both; the pool's node goes.
void LayoutPass::take_pool(int at, Plan& plan, Node& k, int pool) {
  Node& p = g_.nodes[pool];
  plan.call.relu = plan.call.relu || plans_.at(pool).relu;
  k.label = "conv2d[" + layout_name(plan.call.src_block) + " -> " + layout_name(plan.call.dst_block) + "]" +
            (plan.call.relu ? " + relu" : "") + " + max_pool2d";
  k.outputs = {p.outputs[0]};
  g_.values[p.outputs[0]].producer = at;
  p.removed = true;
}

// A max-pool gradient read only by a first layer's few-channel weight
// gradient is made there, plane by plane, instead of written in full (the
// largest activation of a CNN stem) and read back.
void LayoutPass::fuse_pool_grads_into_first_layers() {
  for (auto& [at, plan] : plans_) {
    if (plan.kind != Plan::WeightGrad || !plan.few_channels) continue;
    Node& n = g_.nodes[at];
    const Value& gy = g_.values[n.inputs[1]];
    if (gy.kind != ValueKind::Result || uses_[n.inputs[1]] != 1) continue;
    auto pool = plans_.find(gy.producer);
    if (pool == plans_.end() || pool->second.kind != Plan::MaxPoolGrad) continue;
    Node& p = g_.nodes[gy.producer];
    plan.from_pool = true;
    plan.window = pool->second.window;
    plan.gy_block = pool->second.gy_block;
    plan.block = pool->second.block;
    n.inputs.resize(1);
    n.inputs.insert(n.inputs.end(), p.inputs.begin(), p.inputs.end());
    std::vector<int> reads{0};
    const auto& pool_reads = reads_.at(gy.producer);
    reads.insert(reads.end(), pool_reads.begin(), pool_reads.end());
    reads_[at] = reads;
    reads_.erase(gy.producer);
    p.removed = true;
    plans_.erase(pool);
  }
}

// The algorithm a convolution will run by (timed once per shape), with the
// pool after it where winograd_pool found one.
cpu::ConvAlgorithm LayoutPass::chosen_algorithm(const Plan& plan, const Node& k, int pool) const {
  if (!own_kernels(k)) return cpu::ConvAlgorithm::Direct;
  cpu::onednn::LayoutCall call = plan.call;
  if (pool >= 0) call.relu = call.relu || plans_.at(pool).relu;
  return cpu::fastest_conv_algorithm(call, pool >= 0,
                                     {pointwise_before(plan, k), depthwise_after(plan, k), depthwise_before(plan, k)});
}

// An inference convolution with constant weights runs by Winograd's
// algorithm, as a patch GEMM or on Kiln's depthwise kernel where that
// measured faster; its weight input becomes the transformed or packed
// weights, made here once.
cpu::ConvAlgorithm LayoutPass::own_algorithm(const Plan& plan, Node& k, int pool) {
  const int w = k.inputs[1];
  const cpu::ConvAlgorithm algorithm = chosen_algorithm(plan, k, pool);
  if (algorithm == cpu::ConvAlgorithm::Direct) return algorithm;
  NoGradGuard no_grad;
  const Tensor& source = g_.values[w].tensor;
  const bool patch = algorithm == cpu::ConvAlgorithm::PatchGemm, depthwise = algorithm == cpu::ConvAlgorithm::Depthwise;
  const int tile = algorithm == cpu::ConvAlgorithm::Winograd2x2 ? 2 : 4;
  const std::string kind = patch       ? "patch panels"
                           : depthwise ? "depthwise taps"
                                       : "winograd " + std::to_string(tile) + "x" + std::to_string(tile);
  const std::string suffix = patch ? ".panels" : depthwise ? ".taps" : ".winograd" + std::to_string(tile);
  k.inputs[1] = add_derived_constant(g_, w, kind, suffix, [&] {
    Tensor t = Tensor::empty({cpu::own_weights_size(algorithm, plan.call)});
    cpu::own_weights(algorithm, plan.call, source.contiguous().data<float>(), t.data<float>());
    return t;
  });
  ++(patch ? patch_gemm_ : depthwise ? depthwise_ : tile == 2 ? winograd2_ : winograd4_);
  block_of_.push_back(0);
  return algorithm;
}

// Constant weights are reordered once, here, into the layout oneDNN's
// primitive reads, instead of on every call (at batch 1 the reorders of
// ResNet-18's widest weights took a quarter of the time).
void LayoutPass::prepare_constant_weights(Plan& plan, Node& k) {
  const int w = k.inputs[1];
  if (g_.values[w].kind != ValueKind::Constant) return;
  const int64_t bytes = cpu::onednn::prepared_weights_bytes(plan.call);
  if (bytes == 0) return;
  const Tensor& source = g_.values[w].tensor;
  const std::string kind = "onednn " + cpu::onednn::prepared_weights_layout(plan.call);
  k.inputs[1] = add_derived_constant(g_, w, kind, ".prepared", [&] {
    Tensor t = Tensor::empty({bytes}, DType::UInt8);
    cpu::onednn::prepare_weights(plan.call, source.contiguous().data<float>(), t.raw_data());
    return t;
  });
  block_of_.push_back(0);
  plan.call.prepared_weights = true;
}

// Inference: a squeeze-and-excitation scale, x * s with s [N, C, 1, 1],
// read only by a 1x1 patch GEMM, goes into that convolution: it reads x and
// takes s as a last input, by which it scales its weights per image (a few
// thousand products in place of a pass over the activations: EfficientNet-
// B0's took 300 us of its 2.95 ms). Where the weights outnumber the
// activations (7x7 stages) the multiplication stays.
bool LayoutPass::fold_channel_scale(int at, const Plan& plan, Node& k) {
  const int product = scaling_mul(plan, k);
  if (product < 0) return false;
  const Node& mul = g_.nodes[product];
  const std::vector<bool>& per_channel = plans_.at(product).per_channel;
  const int scale = mul.inputs[per_channel[0] ? 0 : 1], full = mul.inputs[per_channel[0] ? 1 : 0];
  k.inputs[0] = full;
  k.inputs.push_back(scale);
  reads_[at].resize(k.inputs.size(), 0);
  reads_[at][0] = plan.call.src_block;
  reads_[at].back() = block_of_[scale];  // (one value per channel: the same memory in either layout)
  g_.nodes[product].removed = true;
  return true;
}

// The squeeze-and-excitation multiplication fold_channel_scale would take
// into this convolution, or -1.
int LayoutPass::scaling_mul(const Plan& plan, const Node& k) const {
  if (training_ || plan.concat_at >= 0 || plan.carry >= 0 || !cpu::patch_gemm_scales_input(plan.call)) return -1;
  const int x = k.inputs[0];
  if (g_.values[x].kind != ValueKind::Result || uses_[x] != 1) return -1;
  const int product = g_.values[x].producer;
  auto it = plans_.find(product);
  const Node& mul = g_.nodes[product];  // (rewritten already: plans_ go in the graph's order)
  if (it == plans_.end() || it->second.kind != Plan::PerChannel || !mul.computes("mul") || mul.inputs.size() != 2 ||
      it->second.per_channel[0] == it->second.per_channel[1])
    return -1;
  const int full = mul.inputs[it->second.per_channel[0] ? 1 : 0];
  return block_of_[full] == plan.call.src_block ? product : -1;
}

// A last input whose buffer the output takes over, read in `block` (the
// inputs before it may include an omitted bias, which reads_ may not list).
void LayoutPass::read_in_place(int at, Node& k, int id, int block) {
  k.inputs.push_back(id);
  k.inplace_input = static_cast<int>(k.inputs.size()) - 1;
  reads_[at].resize(k.inputs.size(), 0);
  reads_[at].back() = block;
}

void LayoutPass::rewrite_nodes() {
  for (auto& [at, plan] : plans_) {
    Node& n = g_.nodes[at];
    if (n.removed) continue;  // (a pool taken into the convolution before it)
    Node k;
    k.inputs = n.inputs;
    k.outputs = n.outputs;
    const std::string from = layout_name(plan.call.src_block), to = layout_name(plan.call.dst_block),
                      blocked = layout_name(plan.kind == Plan::Conv ? plan.call.dst_block : plan.block);
    switch (plan.kind) {
      case Plan::Conv:
        if (plan.residual >= 0) {
          read_in_place(at, k, plan.residual, plan.call.dst_block);
        }
        if (plan.carry >= 0) {
          read_in_place(at, k, plan.carry, plan.call.dst_block);
        }
        k.label = "conv2d[" + from + " -> " + to + "]" + (plan.residual >= 0 ? " + residual" : "") +
                  (plan.call.relu ? (plan.call.cap > 0 ? " + relu6" : " + relu") : "") +
                  (plan.call.hardswish ? " + hardswish" : "") +
                  (plan.call.hardsigmoid ? " + hardsigmoid" : "") + (plan.call.swish ? " + silu" : "") +
                  (plan.concat_at >= 0 ? " into concat" : "");
        if (plan.pooled) {
          k.outputs = {n.outputs[0]};  // the pool's output
          k.label = "conv2d + relu + max_pool2d[nchw -> " + blocked + "]";
          k.custom = conv_relu_pool_kernel(plan.call);
          k.any_shape = true;  // (the images from its input: at_batch in layout_kernels.cpp)
        } else if (dynamic_batch_ && own_kernels(k) && plan.concat_at < 0 && cpu::conv_algorithm_is_timed(plan.call) &&
                   scaling_mul(plan, k) < 0) {
          // The graph runs at other batch sizes: the algorithm is chosen per
          // size class as it runs (a squeeze-and-excitation scale is folded
          // into a patch GEMM where that was timed fastest, below, instead).
          const int pool = winograd_pool(plan, k);
          if (pool >= 0) take_pool(at, plan, k, pool);
          k.label += " (algorithm by batch size)";
          k.custom = adaptive_conv_kernel(plan.call, pool >= 0);
          k.any_shape = true;
          ++adaptive_;
        } else {
          const int pool = winograd_pool(plan, k);
          const cpu::ConvAlgorithm algorithm = own_algorithm(plan, k, pool);
          switch (algorithm) {
            case cpu::ConvAlgorithm::Winograd2x2:
            case cpu::ConvAlgorithm::Winograd4x4: {
              const int tile = algorithm == cpu::ConvAlgorithm::Winograd2x2 ? 2 : 4;
              if (pool >= 0) take_pool(at, plan, k, pool);
              k.label += tile == 2 ? " (winograd 2x2)" : " (winograd 4x4)";
              k.custom = winograd_conv_kernel(plan.call, tile, pool >= 0);
              k.any_shape = plan.concat_at < 0;
              break;
            }
            case cpu::ConvAlgorithm::PatchGemm: {
              if (join_depthwise(at, plan, k)) break;
              const bool scaled = fold_channel_scale(at, plan, k);
              k.label += scaled ? " (patch gemm, input scaled)" : " (patch gemm)";
              k.custom = patch_gemm_conv_kernel(plan.call, scaled);
              k.any_shape = plan.concat_at < 0;
              if (!scaled && plan.concat_at < 0 && !plan.call.residual) pointwise_outputs_[n.outputs[0]] = plan.call;
              // (Into a concatenation, the parts before it must have split alike.)
              if (cpu::patch_gemm_splits_rows(plan.call) && (plan.carry < 0 || row_banded_.count(plan.carry)))
                row_banded_.insert(n.outputs[0]);
              break;
            }
            case cpu::ConvAlgorithm::Depthwise:
              k.label += plan.call.shape.groups == plan.call.shape.c ? " (depthwise)" : " (grouped)";
              k.custom = depthwise_conv_kernel(plan.call);
              if (const cpu::onednn::LayoutCall* before = pointwise_before(plan, k); fuse_pointwise(at, plan, k)) {
                k.custom = depthwise_chain_kernel(plan.call, *before, std::nullopt);
                depthwise_outputs_[n.outputs[0]] = {at, plan.call, *before};
              } else {
                depthwise_outputs_[n.outputs[0]] = {at, plan.call, std::nullopt};
              }
              k.any_shape = plan.concat_at < 0;
              if (cpu::blocked_depthwise_splits_rows(plan.call)) row_banded_.insert(n.outputs[0]);
              break;
            case cpu::ConvAlgorithm::Direct:
              prepare_constant_weights(plan, k);
              k.custom = conv_kernel(plan.call);
              k.any_shape = plan.concat_at < 0;
              if (plan.call.prepared_weights)  // laid out for the primitive of one batch size: others must read it alike
                k.runs_at = [call = plan.call, layout = cpu::onednn::prepared_weights_layout(plan.call)](
                                const std::vector<TensorMeta>& in, const std::vector<TensorMeta>&) {
                  cpu::onednn::LayoutCall c = call;
                  c.shape.n = in[0].shape[0];
                  return cpu::onednn::prepared_weights_layout(c) == layout;
                };
              break;
          }
          if (plan.concat_at >= 0)
            k.custom = into_concat_kernel(std::move(k.custom), plan.concat_at, plan.call.shape.o, plan.carry >= 0);
        }
        break;
      case Plan::InputGrad:
        k.label = "conv2d_input_grad[" + to + " -> " + from + "]";
        k.custom = conv_input_grad_kernel(plan.call);
        k.any_shape = true;
        break;
      case Plan::WeightGrad:
        k.label = "conv2d_weight_grad[" + from + ", " + to + (plan.few_channels ? ", few channels]" : "]");
        k.custom = conv_weight_grad_kernel(plan.call, plan.few_channels);
        k.any_shape = true;  // (so is the form with the pool's gradient below)
        if (plan.from_pool) {
          k.label = "max_pool2d_backward[" + layout_name(plan.gy_block) + " -> " + blocked + "]" +
                    (n.inputs.size() > 3 ? " + relu" : "") + " + conv2d_weight_grad[" + from + ", few channels]";
          k.custom = conv_weight_grad_from_pool_kernel(plan.call, plan.window, plan.gy_block);
        }
        break;
      case Plan::MaxPool:
        k.outputs = {n.outputs[0]};  // no argmax indices
        k.label = "max_pool2d[" + blocked + "]" + (plan.relu ? " + relu" : "");
        k.custom = max_pool_kernel(plan.window, plan.block, row_banded_.count(n.inputs[0]) > 0, plan.relu);
        k.any_shape = true;
        break;
      case Plan::AvgPool:
        k.label = "avg_pool2d[" + blocked + "]";
        k.custom = avg_pool_kernel(plan.window, plan.block, plan.count_include_pad);
        k.any_shape = true;
        break;
      case Plan::MaxPoolGrad:
        k.label = "max_pool2d_backward[" + layout_name(plan.gy_block) + " -> " + blocked + "]" +
                  (n.inputs.size() > 2 ? " + relu" : "");
        k.custom = max_pool_backward_kernel(plan.window, plan.block, plan.gy_block);
        k.any_shape = true;
        break;
      case Plan::GlobalAverage:
        k.label = "global_avg_pool[" + blocked + " -> nchw]";
        k.custom = global_avg_kernel(plan.block);
        k.any_shape = true;
        break;
      case Plan::Concat:
        k.label = "concat[" + blocked + "]";
        k.custom = blocked_concat_kernel();
        break;
      case Plan::Shuffle:
        k.label = "channel_shuffle[" + blocked + "]";
        k.custom = blocked_channel_shuffle_kernel(plan.groups, plan.block);
        break;
      case Plan::Resize:
        if (plan.carry >= 0) read_in_place(at, k, plan.carry, plan.block);
        k.label = "interpolate[" + blocked + "]" + (plan.concat_at >= 0 ? " into concat" : "");
        k.custom = blocked_interpolate_kernel(n.attrs, plan.block);
        if (plan.concat_at >= 0)  // (an interpolation keeps its input's channels)
          k.custom = into_concat_kernel(std::move(k.custom), plan.concat_at, g_.values[n.inputs[0]].meta.shape[1],
                                        plan.carry >= 0);
        break;
      case Plan::Slice:
        k.label = "slice[" + blocked + "]";
        k.custom = blocked_channel_slice_kernel(plan.start);
        break;
      case Plan::ChannelAffine:
        k.label = "batch_norm[" + blocked + "]" + (plan.relu ? " + relu" : "");
        k.custom = channel_affine_kernel(n.attrs.get_float("eps", 1e-5), plan.block, plan.relu);
        k.any_shape = true;
        break;
      case Plan::BatchNorm:
        k.attrs = n.attrs;
        k.fused_from = n.op;  // it updates the running statistics (inputs 3 and 4) as batch_norm does
        k.label = "batch_norm[" + blocked + "]" + (plan.residual >= 0 ? " + add" : "") + (plan.relu ? " + relu" : "");
        k.custom = batch_norm_train_kernel(n.attrs.get_float("momentum", 0.1), n.attrs.get_float("eps", 1e-5),
                                           plan.block, plan.relu);
        k.any_shape = true;
        break;
      case Plan::BatchNormGrad:
        k.label = (plan.mask >= 0 ? "relu_backward + " : "") + std::string("batch_norm_backward[") + blocked + "]";
        k.custom = batch_norm_grad_kernel(plan.block);
        k.any_shape = true;
        break;
      case Plan::GlobalAverageGrad:
        k.label = "global_avg_pool_backward[nchw -> " + blocked + "]";
        k.custom = global_avg_grad_kernel(plan.block);
        k.any_shape = true;
        break;
      case Plan::PerChannel:
        k.label = n.op->name + "[" + blocked + ", per channel]";
        k.custom = per_channel_elementwise_kernel(*n.op, n.attrs, plan.block, plan.per_channel);
        k.fused_from = n.op;
        break;
    }
    if (k.any_shape && (plan.kind == Plan::Conv || plan.kind == Plan::InputGrad || plan.kind == Plan::WeightGrad))
      batch_only(k);
    n = std::move(k);
  }
  drop_removed_plans();
}

// Convolutions and their gradients take their batch from their tensors and
// the rest of their geometry from the plan: they run at other batch sizes,
// not at other image sizes (a dynamic spatial axis compiles per size).
void LayoutPass::batch_only(Node& k) const {
  std::vector<Shape> in_shapes, out_shapes;
  for (int id : k.inputs) in_shapes.push_back(id >= 0 ? g_.values[id].meta.shape : Shape{});
  for (int id : k.outputs) out_shapes.push_back(g_.values[id].meta.shape);
  auto also = std::move(k.runs_at);
  k.runs_at = [in_shapes, out_shapes, also](const std::vector<TensorMeta>& in, const std::vector<TensorMeta>& out) {
    auto same_but_batch = [](const std::vector<TensorMeta>& now, const std::vector<Shape>& was) {
      for (size_t i = 0; i < now.size() && i < was.size(); ++i) {
        const Shape& a = now[i].shape;
        if (a.size() != was[i].size() || (!a.empty() && !std::equal(a.begin() + 1, a.end(), was[i].begin() + 1)))
          return false;
      }
      return true;
    };
    return same_but_batch(in, in_shapes) && same_but_batch(out, out_shapes) && (!also || also(in, out));
  };
}

// The copy of value `id` in another layout, made once, right after its producer.
int LayoutPass::reorder_copy(int id, int to) {
  const int from = block_of_[id];
  auto it = copies_.find({id, to});
  if (it != copies_.end()) return it->second;
  Value v;
  v.meta = g_.values[id].meta;
  int copy = g_.add_value(std::move(v));
  block_of_.push_back(to);
  Node r;
  r.inputs = {id};
  r.outputs = {copy};
  r.label = "reorder[" + layout_name(from) + " -> " + layout_name(to) + "]";
  r.custom = reorder_kernel(from, to);
  r.any_shape = true;
  const Value& src = g_.values[id];
  (src.kind == ValueKind::Result ? insert_after_[src.producer] : prologue_).push_back(std::move(r));
  copies_[{id, to}] = copy;
  return copy;
}

// A value of one pixel per channel ([N, C, 1, 1]: a squeeze-and-excitation
// vector) whose channels fill the blocks is the same memory plain and
// blocked, so it needs no reorder (one was a oneDNN call of ~8 us).
bool LayoutPass::same_memory_in_both(int id, int want) const {
  const Shape& s = g_.values[id].meta.shape;
  const int64_t block = std::max(want, block_of_[id]);  // 8 or 16, and 8 divides 16
  return s.size() == 4 && s[2] == 1 && s[3] == 1 && s[1] % block == 0;
}

// Every input is read in the layout its reader takes: reorders where they differ.
void LayoutPass::insert_reorders() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    Node& n = g_.nodes[i];
    if (n.removed) continue;
    auto r = reads_.find(static_cast<int>(i));
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int id = n.inputs[k];
      if (id < 0) continue;
      const int want = r != reads_.end() && k < r->second.size() ? r->second[k] : 0;
      if (want != block_of_[id] && !same_memory_in_both(id, want)) n.inputs[k] = reorder_copy(id, want);
    }
  }
  for (int& id : g_.outputs)
    if (block_of_[id]) id = reorder_copy(id, 0);
  g_.splice(std::move(prologue_), std::move(insert_after_));
}

std::string LayoutPass::summary(size_t residuals, size_t hard_activations, size_t read_blocked, size_t concats_in_place) const {
  size_t convs = 0, grads = 0, pools = 0, concats = 0, shuffles = 0;
  for (const auto& [at, plan] : plans_) {
    convs += plan.kind == Plan::Conv;
    grads += plan.kind == Plan::InputGrad || plan.kind == Plan::WeightGrad || plan.kind == Plan::MaxPoolGrad;
    pools += plan.kind == Plan::MaxPool || plan.kind == Plan::AvgPool || plan.kind == Plan::GlobalAverage;
    concats += plan.kind == Plan::Concat || plan.concat_at > 0;
    shuffles += plan.kind == Plan::Shuffle;
  }
  convs += pointwise_in_depthwise_;  // (their plans went with their nodes)
  if (convs == 0) return "";
  std::set<int> blocks;
  for (int b : block_of_)
    if (b) blocks.insert(b);
  std::string s = std::to_string(convs) + " convolutions on ";
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) s += (it == blocks.rbegin() ? "" : " and ") + layout_name(*it);
  s += " activations";
  if (pools) s += ", " + std::to_string(pools) + " pools on them";
  if (concats) s += ", " + std::to_string(concats) + " concatenations of them";
  if (concats_in_place) s += ", " + std::to_string(concats_in_place) + " concatenations written in place";
  if (shuffles) s += ", " + std::to_string(shuffles) + " channel shuffles of them";
  if (grads) s += ", " + std::to_string(grads) + " gradients on them";
  if (read_blocked) s += ", " + std::to_string(read_blocked) + " linear layers reading them flattened";
  if (residuals) s += ", " + std::to_string(residuals) + " residual adds folded into them";
  if (hard_activations) s += ", " + std::to_string(hard_activations) + " hard-swishes and hard-sigmoids folded into them";
  if (winograd2_) s += ", " + std::to_string(winograd2_) + " by Winograd's F(2x2, 3x3)";
  if (winograd4_) s += ", " + std::to_string(winograd4_) + " by Winograd's F(4x4, 3x3)";
  if (patch_gemm_) s += ", " + std::to_string(patch_gemm_) + " as patch GEMMs";
  if (depthwise_) s += ", " + std::to_string(depthwise_) + " on the blocked depthwise kernel";
  if (pointwise_in_depthwise_)
    s += ", " + std::to_string(pointwise_in_depthwise_) + " 1x1 layers made inside the depthwise layer next to them";
  if (adaptive_) s += ", " + std::to_string(adaptive_) + " choosing their algorithm per batch size as they run";
  s += ", " + std::to_string(copies_.size()) + " reorders";
  return s;
}

}  // namespace kiln::graph::layout

// The convolution layout pass: MobileNet blocks made as one node. A 1x1
// patch GEMM next to a depthwise layer on Kiln's kernel, its expansion
// before or its projection after, runs inside that layer's node
// (depthwise_chain_conv), which the rewrite (layout_rewrite.cpp) asks for
// here as it reaches each convolution in the graph's order.
#include "backends/cpu/blocked_depthwise.h"
#include "backends/cpu/conv_algorithm.h"
#include "backends/cpu/passes/layout_kernels.h"
#include "backends/cpu/passes/layout_pass.h"

namespace kiln::graph::layout {

// The 1x1 patch GEMM whose output only this convolution reads, or null.
const cpu::onednn::LayoutCall* LayoutPass::pointwise_before(const Plan& plan, const Node& k) const {
  const int x = k.inputs[0];
  auto it = pointwise_outputs_.find(x);
  return it == pointwise_outputs_.end() || uses_[x] != 1 || plan.concat_at >= 0 ? nullptr : &it->second;
}

// The depthwise convolution with constant weights that alone reads this
// convolution's output (a 1x1 layer with no residual, scale or
// concatenation), or null.
const cpu::onednn::LayoutCall* LayoutPass::depthwise_after(const Plan& plan, const Node& k) const {
  const int y = k.outputs[0];
  if (plan.concat_at >= 0 || plan.residual >= 0 || plan.call.residual || uses_[y] != 1 || readers_[y].size() != 1 ||
      scaling_mul(plan, k) >= 0)
    return nullptr;
  const int reader = readers_[y][0].first;
  auto it = plans_.find(reader);
  if (it == plans_.end() || it->second.kind != Plan::Conv || it->second.concat_at >= 0 ||
      !own_kernels(g_.nodes[reader]) || readers_[y][0].second != 0)
    return nullptr;
  return &it->second.call;
}

// The depthwise layer on Kiln's kernel whose output only this convolution
// reads, or null.
const cpu::onednn::LayoutCall* LayoutPass::depthwise_before(const Plan& plan, const Node& k) const {
  const int x = k.inputs[0];
  auto it = depthwise_outputs_.find(x);
  return it == depthwise_outputs_.end() || uses_[x] != 1 || plan.concat_at >= 0 || scaling_mul(plan, k) >= 0
             ? nullptr
             : &it->second.call;
}

// Inference: a 1x1 patch GEMM that alone reads a depthwise layer's output
// on Kiln's kernel (a MobileNet block's projection, with its residual)
// joins that layer's node (depthwise_chain_conv), which k becomes: the
// chain's inputs (depthwise_chain_kernel), the depthwise node removed.
bool LayoutPass::join_depthwise(int at, const Plan& plan, Node& k) {
  const cpu::onednn::LayoutCall* before = depthwise_before(plan, k);
  if (!before || !cpu::depthwise_pointwise_applies(*before, plan.call) ||
      !cpu::depthwise_join_pays(*before, nullptr, &plan.call))
    return false;
  const DepthwiseOutput& d = depthwise_outputs_.at(k.inputs[0]);
  Node& depthwise = g_.nodes[d.node];
  std::vector<int> inputs = depthwise.inputs;
  if (!d.expand) inputs = {inputs[0], -1, -1, inputs[1], d.call.bias ? inputs[2] : -1};
  inputs.push_back(k.inputs[1]);
  inputs.push_back(plan.call.bias ? k.inputs[2] : -1);
  std::vector<int> reads(inputs.size(), 0);
  reads[0] = d.expand ? d.expand->src_block : d.call.src_block;
  if (plan.residual >= 0) {  // (read_in_place put it last: it moves with its reading)
    inputs.push_back(plan.residual);
    reads.push_back(plan.call.dst_block);
    k.inplace_input = static_cast<int>(inputs.size()) - 1;
  }
  k.inputs = std::move(inputs);
  reads_[at] = std::move(reads);
  k.label = depthwise.label + " + " + k.label + " (patch gemm)";
  k.custom = depthwise_chain_kernel(d.call, d.expand, plan.call);
  k.any_shape = true;
  depthwise.removed = true;
  row_banded_.insert(k.outputs[0]);
  ++pointwise_in_depthwise_;
  return true;
}

// Inference: a 1x1 patch GEMM whose output only this depthwise convolution
// reads (a MobileNet block's expansion) runs inside it, a few rows at a
// time as the windows reach them (depthwise_chain_conv): k takes the 1x1
// layer's inputs first, x, panels and bias, then its own taps and bias.
bool LayoutPass::fuse_pointwise(int at, const Plan& plan, Node& k) {
  const cpu::onednn::LayoutCall* before = pointwise_before(plan, k);
  if (!before || !cpu::pointwise_depthwise_applies(*before, plan.call) ||
      !cpu::depthwise_join_pays(plan.call, before, nullptr))
    return false;
  Node& expand = g_.nodes[g_.values[k.inputs[0]].producer];
  const int bias = plan.call.bias ? k.inputs[2] : -1;
  k.inputs = {expand.inputs[0], expand.inputs[1], before->bias ? expand.inputs[2] : -1, k.inputs[1], bias};
  reads_[at] = {before->src_block, 0, 0, 0, 0};
  k.label = expand.label + " + " + k.label;
  expand.removed = true;
  ++pointwise_in_depthwise_;
  return true;
}

}  // namespace kiln::graph::layout

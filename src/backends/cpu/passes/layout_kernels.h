#pragma once
// The kernels graph mode's layout pass puts in place of convolutions, pools
// and their gradients when they read or write channel-blocked activations.
#include <optional>

#include "backends/cpu/blocked_pool.h"
#include "backends/cpu/onednn_conv.h"
#include "graph/ir.h"

namespace kiln::graph {

// The call for the images this run has: a graph symbolic in its batch runs
// its convolutions at other batch sizes, each on a primitive of its own
// (made on first use, then cached). The kernels below take their batch so.
cpu::onednn::LayoutCall at_batch(cpu::onednn::LayoutCall call, const Tensor& images);
// in: x, w, [bias], [residual (also the output's buffer)] -> y.
CustomKernel conv_kernel(const cpu::onednn::LayoutCall& call);
// The same by the algorithm timed fastest at each size class of the batch,
// the first time it runs at one (adaptive_conv.cpp); w stays plain.
// pooled: y is the 2x2, stride-2 max pool of that, call.relu the ReLU before it.
CustomKernel adaptive_conv_kernel(const cpu::onednn::LayoutCall& call, bool pooled);
// The same by Winograd's F(tile x tile, 3x3), w replaced by its transform
// (winograd_weights); max_pool: y is the 2x2, stride-2 max pool of that.
CustomKernel winograd_conv_kernel(const cpu::onednn::LayoutCall& call, int tile, bool max_pool);
// The same as one GEMM per image over its patches, w replaced by its panels
// (patch_gemm_weights). channel_scale: a last input [N or 1, C, 1, 1] that
// x's channels are taken times (patch_gemm_scales_input).
CustomKernel patch_gemm_conv_kernel(const cpu::onednn::LayoutCall& call, bool channel_scale = false);
// A depthwise convolution on Kiln's blocked kernel, w replaced by its taps
// (blocked_depthwise_weights).
CustomKernel depthwise_conv_kernel(const cpu::onednn::LayoutCall& call);
// A depthwise layer with the 1x1 layers next to it that it makes inside it
// (depthwise_chain_conv). in: x, the expansion's panels and bias, the
// depthwise layer's taps and bias, the projection's panels and bias, [the
// projection's residual (also the output's buffer)]; what a chain lacks is
// no value (-1).
CustomKernel depthwise_chain_kernel(const cpu::onednn::LayoutCall& call, std::optional<cpu::onednn::LayoutCall> expand,
                                    std::optional<cpu::onednn::LayoutCall> project);
// A convolution kernel (one of the above, no residual) that writes its
// `channels` at `first` of a blocked one-image concatenation: out is the
// whole concatenation; with `carry`, the last input is the concatenation so
// far, whose buffer out takes over (or is copied to).
CustomKernel into_concat_kernel(CustomKernel conv, int64_t first, int64_t channels, bool carry);
// in: x (plain, few channels), w, [bias] -> max_pool_2x2(relu(conv)) (blocked).
CustomKernel conv_relu_pool_kernel(const cpu::onednn::LayoutCall& call);
// in: gy, w -> gx.
CustomKernel conv_input_grad_kernel(const cpu::onednn::LayoutCall& call);
// in: x, gy -> gw, [gb]. few_channels: the direct kernel for a plain x with
// few channels instead of oneDNN.
CustomKernel conv_weight_grad_kernel(const cpu::onednn::LayoutCall& call, bool few_channels);
// in: x, then the inputs of the max-pool gradient that makes gy (gy of the
// pool, the pool's input, [mask]) -> gw, [gb]: the few-channel weight
// gradient fused with that max-pool gradient.
CustomKernel conv_weight_grad_from_pool_kernel(const cpu::onednn::LayoutCall& call, cpu::PoolWindow window, int gy_block);
// in: x (blocked) -> y (blocked); no argmax indices.
CustomKernel max_pool_kernel(cpu::PoolWindow window, int block, bool row_bands, bool relu);
// in: x (blocked) -> y (blocked), each window's average.
CustomKernel avg_pool_kernel(cpu::PoolWindow window, int block, bool count_include_pad);
// in: gy (blocked when gy_block), x (the pool's input, blocked), [mask] -> gx (blocked).
CustomKernel max_pool_backward_kernel(cpu::PoolWindow window, int block, int gy_block);
// in: x (blocked) -> [N, C] plain.
CustomKernel global_avg_kernel(int block);
// Blocked values concatenated along channels, each a whole number of blocks:
// per image, each input's blocks follow the previous input's.
CustomKernel blocked_concat_kernel();
// A channel shuffle on blocked values (ShuffleNet's Reshape-Transpose-Reshape):
// y channel i * groups + k is x channel k * (C / groups) + i, all blocked
// alike. in: x, or the `groups` parts of C / groups channels that x would be
// concatenated from; out: y, or consecutive parts of it (channel slices).
CustomKernel blocked_channel_shuffle_kernel(int64_t groups, int block);
// Channels [start, end) of a blocked value, both a whole number of blocks.
CustomKernel blocked_channel_slice_kernel(int64_t start);
// in: x (blocked) -> y (blocked), the interpolate op with these attributes
// (not tf_crop_and_resize).
CustomKernel blocked_interpolate_kernel(const Attrs& attrs, int block);
CustomKernel reorder_kernel(int from_block, int to_block);
// An elementwise op (its CPU kernel) on a blocked [N, C, H, W] output whose
// inputs are blocked like it, scalars, or [N, C, 1, 1] vectors
// (`per_channel`): every tensor is viewed as [N, C / block, H, W, block] (a
// vector as [N, C / block, 1, 1, block], the same memory in either layout),
// where the op's own broadcasting does the rest. A squeeze-and-excitation
// scale so stays on the blocked activations.
// in: x (blocked), weight?, bias?, running mean, running variance (plain
// [C]) -> y = (x - mean) / sqrt(var + eps) * weight + bias (blocked), then
// max(y, 0) with relu: an inference batch norm as one pass.
CustomKernel channel_affine_kernel(double eps, int block, bool relu);
// Training: in: x (blocked), weight?, bias?, running mean?, running
// variance? (plain [C], updated), [residual (blocked)] -> y (blocked), the
// batch's mean and 1 / sqrt(var + eps) ([C]); y gets the residual added and
// the ReLU applied when asked (blocked_batch_norm.h).
CustomKernel batch_norm_train_kernel(double momentum, double eps, int block, bool relu);
// in: gy (blocked), x (blocked), weight?, saved mean, saved rstd, [mask
// (blocked): gy counts where it is > 0] -> gx (blocked), gw, gb ([C]).
CustomKernel batch_norm_grad_kernel(int block);
// in: gy [N, C, 1, 1], x (blocked; read for its shape) -> gx (blocked), gy / (H * W) everywhere.
CustomKernel global_avg_grad_kernel(int block);
CustomKernel per_channel_elementwise_kernel(const OpDef& op, const Attrs& attrs, int block, std::vector<bool> per_channel);

}  // namespace kiln::graph

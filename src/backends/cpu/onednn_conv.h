#pragma once
// float32 convolutions through oneDNN primitives, cached per geometry. Each
// geometry runs in plain NCHW/OIHW layouts or in oneDNN's blocked ones
// (reordering Kiln's plain tensors), whichever measured faster on first use.
#include <cstdint>
#include <string>

namespace kiln::cpu::onednn {

struct ConvShape {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight [o, c/groups, kh, kw]
  int64_t oh, ow;          // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
};

// Each returns false (and does nothing) when oneDNN cannot express the case,
// so the caller falls back to its own path.
// relu: apply a ReLU to the output in the same call.
bool conv_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y, bool relu = false);
bool conv_backward_data(const ConvShape& s, const float* gy, const float* w, float* gx);
// gb (optional): also the bias gradient, the sum of gy over N, H and W.
bool conv_backward_weights(const ConvShape& s, const float* x, const float* gy, float* gw, float* gb = nullptr);

// Activation layouts for graph mode's layout pass: 0 is plain NCHW, 8 and 16
// are oneDNN's channel-blocked nChw8c / nChw16c (same size when C is a
// multiple of the block). preferred_block() is what oneDNN picks for this CPU.
int preferred_block();
// A float32 convolution pass on activations in given layouts. For the
// backward passes, src_block is the layout of x and its gradient, dst_block
// that of y's gradient. Weights and their gradients are always plain.
enum class ConvPass { Forward, BackwardData, BackwardWeights };
struct LayoutCall {
  ConvShape shape;
  ConvPass kind = ConvPass::Forward;
  int src_block = 0, dst_block = 0;
  bool bias = false;
  bool relu = false;      // forward only: ReLU on the output
  float cap = 0;          // forward only, with relu: above 0, the output capped at it too (ReLU6: 6), NaN passing
  bool hardswish = false; // forward only: hard-swish on the output (oneDNN's post-op), without a residual
  bool hardsigmoid = false;  // forward only: PyTorch's hard-sigmoid on the output, likewise
  bool swish = false;        // forward only: x * sigmoid(x) on the output (SiLU), likewise
  bool residual = false;  // forward only: y holds a tensor to add (a shortcut) and receives conv + y, before the ReLU
  // forward only: the weights passed are already in the primitive's layout
  // (prepare_weights), as constant weights are once, rather than plain.
  bool prepared_weights = false;
};
// Whether oneDNN has an optimized kernel for this call (not its reference one).
bool conv_layout_is_fast(const LayoutCall& c);
// Constant weights reordered once, for calls with prepared_weights: the size
// in bytes of the primitive's layout (0 when there is no primitive), and the
// reorder into out.
int64_t prepared_weights_bytes(const LayoutCall& c);
// That layout in words (dimensions, strides, blocks): equal strings, equal layouts.
std::string prepared_weights_layout(const LayoutCall& c);
void prepare_weights(const LayoutCall& c, const float* w, void* out);
// Each returns false when oneDNN cannot express the call.
bool conv_forward_layout(const LayoutCall& c, const float* x, const float* w, const float* bias, float* y);
bool conv_backward_data_layout(const LayoutCall& c, const float* gy, const float* w, float* gx);
// gb: the bias gradient too (c.bias must be set), or null.
bool conv_backward_weights_layout(const LayoutCall& c, const float* x, const float* gy, float* gw, float* gb);
void reorder_layout(int64_t n, int64_t c, int64_t h, int64_t w, int from_block, int to_block, const float* src,
                    float* dst);

}  // namespace kiln::cpu::onednn

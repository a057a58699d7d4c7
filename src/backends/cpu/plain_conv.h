#pragma once
// Convolutions on plain NCHW float32 that oneDNN runs slowly in that layout
// (it reorders to blocked and back inside the call): depthwise ones (one
// filter per channel, as in MobileNet and ShuffleNet) as direct loops over
// whole output rows, and pointwise (1x1) ones as one GEMM per image.
// They matter where channel counts do not fill oneDNN's blocks, so graph
// mode leaves the activations plain.
#include <cstdint>

namespace kiln::cpu {

struct PlainConv {
  int64_t n, c, h, w, o, kh, kw, oh, ow, sh, sw, ph, pw, dh, dw, groups;
};

// Whether these fast forms cover the convolution.
bool depthwise_conv_applies(const PlainConv& g);
bool pointwise_conv_applies(const PlainConv& g);
// y = conv(x, w) + bias (optional), ReLU'd when relu (NaN passes, as in relu).
void depthwise_conv(const PlainConv& g, const float* x, const float* w, const float* bias, float* y, bool relu);
void pointwise_conv(const PlainConv& g, const float* x, const float* w, const float* bias, float* y, bool relu);

}  // namespace kiln::cpu

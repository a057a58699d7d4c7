#pragma once
// Convolutions of few input channels (a network's stem: 3 colour channels,
// 7x7 or 3x3, stride 2) on Kiln's int8 tiles as an implicit GEMM over a
// channels-last image: the image padded once with x's zero point; then each
// output pixel's patch is kh runs of kw * c contiguous bytes, which the
// tiles read in place (int8_gemm::Call's segments and blocks), each run
// rounded up to whole 4-byte groups against zero weights. oneDNN's int8
// kernel for ResNet-18's 3-channel 7x7 stem ran at half vpdpbusd's peak
// (394 us) where its 64-channel 3x3 layers ran at over 80%; this runs it in
// 225 us, and a 1-channel 3x3 layer over a batch of 64 28x28 images in 20%
// less time than oneDNN (2-core Intel Sapphire Rapids).
#include <cstdint>

#include "backends/cpu/int8_gemm.h"
#include "backends/cpu/onednn_conv.h"

namespace kiln::cpu::int8_patch_conv {

using onednn::ConvShape;

// Whether it takes the convolution: a build with VNNI, one group, few
// input channels, no dilation across a row (a patch row must be contiguous).
bool takes(const ConvShape& s);

// Weights [o, c, kh, kw] as a [kh * run, o] product, each kernel row's
// kw * c values padded to a whole run of 4-byte groups.
int64_t packed_bytes(const ConvShape& s);
void pack(const ConvShape& s, const int8_t* w, void* out);

// y [n, oh, ow, o] from x [n, h, w, c] (channels-last, uint8 or int8 as
// q.a_signed says): q carries the requantization as for a matrix product
// (scales, per_column, bias, a_zero, y_zero, y_signed); its shape fields
// are set here.
void run(const ConvShape& s, const int8_gemm::Call& q, const void* x, const void* packed, void* y);

}  // namespace kiln::cpu::int8_patch_conv

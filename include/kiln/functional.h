#pragma once
// The op API: one function per registered op (plus a few compositions).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

// Elementwise unary.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor asin(const Tensor& x);  // and the other inverse trigonometric and hyperbolic functions
Tensor acos(const Tensor& x);
Tensor atan(const Tensor& x);
Tensor asinh(const Tensor& x);
Tensor acosh(const Tensor& x);
Tensor atanh(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);  // relu6(x + 3) / 6
Tensor hardswish(const Tensor& x);    // x * hardsigmoid(x)
Tensor erf(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);  // half to even
Tensor square(const Tensor& x);

// Elementwise binary, with NumPy broadcasting and type promotion.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
// a - b * floor(a / b): the sign of b, as Python's % and torch.remainder (op `mod`).
Tensor remainder(const Tensor& a, const Tensor& b);
// a - b * trunc(a / b): the sign of a, as C's fmod and torch.fmod (`mod` with fmod).
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor cast(const Tensor& x, DType dtype);
// Row-major index of x's first inf or NaN; -1 when every value is finite
// (always for integer and bool tensors). Reads the values: not an op, no gradient.
int64_t first_non_finite(const Tensor& x);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// Reductions over `axes` (empty: all axes).
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor var(const Tensor& x, const std::vector<int64_t>& axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& axes = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t axis = -1);
// A bool scalar: true when no value of any of the tensors is inf or NaN.
Tensor all_finite(const std::vector<Tensor>& tensors);
// softmax(q k^T * scale + mask) v over the last two axes, the leading ones
// (batch, heads) shared: q [..., L, D], k [..., S, D], v [..., S, Dv] ->
// [..., L, Dv], as torch's scaled_dot_product_attention. mask: additive, of
// q's dtype, broadcasting to [..., L, S]; causal: query i sees keys j <= i;
// scale 0: 1 / sqrt(D). A query that sees no key gets zeros. One op with a
// fused kernel; its gradient reuses the weights when one is taken.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask = Tensor(),
                                    bool causal = false, double scale = 0);
Tensor log_softmax(const Tensor& x, int64_t axis = -1);
Tensor cumsum(const Tensor& x, int64_t axis);
Tensor cumprod(const Tensor& x, int64_t axis);
// Sums broadcast axes away so that the result has `shape` (used by gradients).
Tensor sum_to(const Tensor& x, const Shape& shape);

// Linear algebra and convolution.
Tensor matmul(const Tensor& a, const Tensor& b);
// Einstein summation, as numpy.einsum and ONNX Einsum: "bij,bjk->bik",
// "ii->i", "...ij->...ji", implicit outputs ("ij,jk"); operands broadcast
// where an index has size 1.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
struct ConvOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
  std::vector<int64_t> output_padding{0, 0};  // conv_transpose2d only
};
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const ConvOptions& o = {});
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvOptions& o = {});
// Quantized tensors: a uint8 or int8 value q stands for scale * (q - zero).
// The integer convolution and matrix product of such an input with int8
// weights that are symmetric (zero point 0), with one scale or one per output
// channel (a column of b), requantized to y_scale and y_zero's dtype: ONNX's
// QLinearConv and QLinearMatMul. bias: int32 in the accumulator's scale
// (x_scale * w_scale). b is [K, N]; a [..., M, K].
Tensor qlinear_conv2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero, const Tensor& weight,
                      const Tensor& w_scale, const Tensor& y_scale, const Tensor& y_zero, const Tensor& bias = Tensor(),
                      const ConvOptions& o = {});
Tensor qlinear_matmul(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                      const Tensor& b_scale, const Tensor& y_scale, const Tensor& y_zero, const Tensor& bias = Tensor());
// The integer product of two quantized activations a [..., M, K] and
// b [..., K, N] (one batch shape; uint8 or int8 each, one scale and zero
// point each), requantized to y_scale and y_zero's dtype: ONNX's
// QLinearMatMul where both operands are computed, as in attention.
Tensor qlinear_batch_matmul(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                            const Tensor& b_scale, const Tensor& b_zero, const Tensor& y_scale, const Tensor& y_zero);
// ONNX's DynamicQuantizeLinear: {y, scale, zero_point} mapping float32 x's
// range [min(x, 0), max(x, 0)] onto uint8 (scale = range / 255, zero point
// rounded half to even), y = saturate(round(x / scale) + zero_point).
std::vector<Tensor> dynamic_quantize_linear(const Tensor& x);
// A dynamically quantized product in float32: (a - a_zero) @ b in int32,
// times a_scale * b_scale, plus bias. a [..., K] uint8 or int8 with one
// scale and zero point (computed per run, as DynamicQuantizeLinear makes
// them); b symmetric int8 [K, N], its scale one value or [N]; bias float32
// [N] or undefined. ONNX Runtime's MatMulIntegerToFloat with symmetric weights.
Tensor matmul_integer_to_float(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b,
                               const Tensor& b_scale, const Tensor& bias = Tensor());
// A float32 product with weights quantized in blocks along K (weight-only
// 2-, 4- or 8-bit LLM weights; ONNX Runtime's MatMulNBits): a [..., K] by
// b uint8 [N, ceil(K / block_size), block_size * bits / 8], codes packed low
// bits first; code q of row n in block j is (q - zero_points[n, j]) *
// scales[n, j], zero points float32 [N, blocks] or undefined (2^(bits - 1));
// y [..., N] = a @ dequantized(b)^T + bias (float32 [N] or undefined), in
// float32; accuracy_level 4 (ONNX Runtime's int8 compute) rounds a to int8
// per block first (scale max |a| / 127) and sums each block's products in
// integers, which is faster; levels 0 to 3 compute in float32.
Tensor matmul_nbits(const Tensor& a, const Tensor& b, const Tensor& scales, const Tensor& zero_points = Tensor(),
                    const Tensor& bias = Tensor(), int64_t bits = 4, int64_t block_size = 32,
                    int64_t accuracy_level = 0);
// The sum of two quantized tensors of one shape, requantized: ONNX Runtime's QLinearAdd.
Tensor qlinear_add(const Tensor& a, const Tensor& a_scale, const Tensor& a_zero, const Tensor& b, const Tensor& b_scale,
                   const Tensor& b_zero, const Tensor& y_scale, const Tensor& y_zero);
// x (float32) as 8-bit values: saturate(round(x / scale) + zero), rounding
// half to even, in zero's dtype; and back: (q - zero) * scale. One scale and
// zero point each: ONNX's QuantizeLinear and DequantizeLinear per tensor.
Tensor quantize_linear(const Tensor& x, const Tensor& scale, const Tensor& zero);
Tensor dequantize_linear(const Tensor& q, const Tensor& scale, const Tensor& zero);
// A quantized tensor with its scale and zero point (one value each).
struct QuantizedTensor {
  Tensor values, scale, zero;
};
// Quantized tensors of one dtype joined along axis, each requantized to
// y_scale and y_zero: ONNX Runtime's QLinearConcat.
Tensor qlinear_concat(const std::vector<QuantizedTensor>& inputs, const Tensor& y_scale, const Tensor& y_zero,
                      int64_t axis = 1);
// The average of each window of x [N, C, H, W], requantized to y's
// parameters: ONNX Runtime's QLinearAveragePool (symmetric padding, counted
// in the average or not). stride defaults to the kernel.
Tensor qlinear_avg_pool2d(const Tensor& x, const Tensor& x_scale, const Tensor& x_zero, const Tensor& y_scale,
                          const Tensor& y_zero, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                          std::vector<int64_t> padding = {0, 0}, bool count_include_pad = true);
// Volumes [N, C, D, H, W] and weights [out, in/groups, kD, kH, kW], with
// stride, padding and dilation per axis (D, H, W): one 2-D convolution of
// the depth slices per kernel depth, summed, so it has gradients throughout.
struct Conv3dOptions {
  std::vector<int64_t> stride{1, 1, 1};
  std::vector<int64_t> padding{0, 0, 0};
  std::vector<int64_t> dilation{1, 1, 1};
  int64_t groups = 1;
  std::vector<int64_t> output_padding{0, 0, 0};  // conv_transpose3d only
};
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv3dOptions& o = {});
// weight [in, out/groups, kD, kH, kW]; as conv_transpose2d, a 2-D op per depth tap.
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv3dOptions& o = {});

// Pooling.
// ceil_mode: a last, partial window at the end of each axis, as in PyTorch.
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
// Max over [kD, kH, kW] windows of a volume [N, C, D, H, W]; padding counts
// as -inf; pooled per depth slice, then across the depth window.
Tensor max_pool3d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0, 0}, std::vector<int64_t> dilation = {1, 1, 1});
// Resizing H and W of an NCHW tensor, as PyTorch's interpolate: "nearest"
// "bilinear" or "bicubic" (align_corners maps the corner pixels onto each other).
// The `interpolate` op itself takes any of ONNX Resize's coordinate mappings.
Tensor interpolate(const Tensor& x, std::vector<int64_t> size, const std::string& mode = "nearest",
                   bool align_corners = false);
Tensor interpolate(const Tensor& x, double scale_factor, const std::string& mode = "nearest",
                   bool align_corners = false);

// Normalization and regularization.
// In training mode, running_mean/var (when given) are updated in place.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor group_norm(const Tensor& x, int64_t groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor dropout(const Tensor& x, double p, bool training);

// One recurrent layer in one direction over x [T, N, I] (time first), with
// PyTorch's weights: w_ih [G*H, I], w_hh [G*H, H], biases [G*H], states
// [N, H], gates in PyTorch's order (LSTM i f g o, G = 4; GRU r z n, G = 3).
// Optional tensors may be undefined (zeros). reverse runs from T-1 to 0.
// nn::LSTM, GRU and RNN stack these into layers and directions.
struct RecurrentOutput {
  Tensor y;    // [T, N, H], the hidden state at every step
  Tensor h_n;  // [N, H], the last step's hidden state
  Tensor c_n;  // [N, H], LSTM's last cell state (undefined for GRU and RNN)
};
RecurrentOutput lstm(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                     const Tensor& b_hh = Tensor(), const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor(),
                     bool reverse = false);
RecurrentOutput gru(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                    const Tensor& b_hh = Tensor(), const Tensor& h0 = Tensor(), bool reverse = false);
// nonlinearity: "tanh" or "relu".
RecurrentOutput rnn(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih = Tensor(),
                    const Tensor& b_hh = Tensor(), const Tensor& h0 = Tensor(), const std::string& nonlinearity = "tanh",
                    bool reverse = false);

// Indexing.
// padding_idx >= 0: that row gets no gradient (the padding token's).
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
Tensor gather(const Tensor& x, int64_t axis, const Tensor& index);
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src);
// src combined into a copy of x at index along axis, x's values included:
// reduce "prod", "amax", "amin" (or "sum", scatter_add), as
// torch.scatter_reduce(..., include_self=True) and ONNX ScatterElements.
Tensor scatter_reduce(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, const std::string& reduce);
Tensor one_hot(const Tensor& indices, int64_t num_classes);
// Index tuples into the leading axes (after `batch_dims` shared batch axes),
// as ONNX GatherND and ScatterND: indices [..., k] pick x[i_1, ..., i_k, ...]
// (negative indices count from the end). gather_nd gives indices.shape[:-1] +
// x.shape[batch_dims + k:]; scatter_nd writes updates of that shape into a
// copy of x (reduction "none"), or combines them with it ("add", "mul",
// "max", "min"). Both have gradients through the ops they use.
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims = 0);
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction = "none");
// The k largest (largest=false: smallest) values along `axis`, sorted, and
// their int64 indices, as torch.topk (ties: the lower index first).
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true);

// Collectives, as ops so that a compiled training step issues them where
// its gradients become ready: start reducing `buffer` in place across the
// ranks of a process group (its dist::handle_of) with op sum, mean, max or
// min; wait for it before reading or writing the buffer again.
void all_reduce_start(const Tensor& buffer, int64_t group, const std::string& op = "sum");
void all_reduce_wait(const Tensor& buffer);
// The all-reduce as a value: every rank gets the reduction of the ranks' x,
// at once. For sums it has a gradient (the sum of the ranks' gradients).
Tensor all_reduce(const Tensor& x, int64_t group, const std::string& op = "sum");

// Joining, splitting, padding, masking.
Tensor concat(const std::vector<Tensor>& tensors, int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0);
// pads: (before, after) per axis starting from the last one, like torch.nn.functional.pad;
// mode: constant (value), reflect, replicate (the edge) or circular (wrap around).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode = "constant",
           double value = 0.0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// Fused losses. reduction: "mean", "sum" or "none".
struct CrossEntropyOptions {
  Tensor weight;  // per-class weights, optional
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  std::string reduction = "mean";
  // Logits [..., C] with targets [...] (language models: [N, T, V] and [N, T])
  // instead of PyTorch's [N, C, ...]; no transpose is made.
  bool classes_last = false;
};
// target: class indices (int64, the logits' shape without the class axis), or
// class probabilities of the logits' shape (soft targets, as PyTorch).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o = {});
// -sum_c w_c p_c log softmax(logits)_c per item, with p smoothed by
// label_smoothing; "mean" averages over items. ignore_index does not apply.
Tensor soft_cross_entropy(const Tensor& logits, const Tensor& probs, const CrossEntropyOptions& o = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                      double beta = 1.0);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const std::string& reduction = "mean");

}  // namespace kiln

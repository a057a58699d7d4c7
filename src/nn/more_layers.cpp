#include <algorithm>
#include <cmath>

#include "kiln/nn/layers.h"

namespace kiln::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions o) : o_(o) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && in_channels % o.groups == 0 &&
                 out_channels % o.groups == 0,
             "Conv1d(", in_channels, ", ", out_channels, ", ", kernel_size, ", groups=", o.groups,
             "): sizes must be positive and channels divisible by groups");
  int64_t fan_in = in_channels / o.groups * kernel_size;
  weight = register_parameter("weight", init::default_uniform({out_channels, in_channels / o.groups, kernel_size}, fan_in));
  if (o.bias) bias = register_parameter("bias", init::default_uniform({out_channels}, fan_in));
}

Tensor Conv1d::construct(const Tensor& x) { return conv1d(x, weight, bias, o_.stride, o_.padding, o_.dilation, o_.groups); }

Conv2dTranspose::Conv2dTranspose(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTransposeOptions o)
    : o_(o) {
  KILN_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && in_channels % o.groups == 0 &&
                 out_channels % o.groups == 0,
             "Conv2dTranspose(", in_channels, ", ", out_channels, ", ", kernel_size, ", groups=", o.groups,
             "): sizes must be positive and channels divisible by groups");
  // PyTorch computes the fan-in of a transposed convolution from weight.size(1).
  int64_t fan_in = out_channels / o.groups * kernel_size * kernel_size;
  weight = register_parameter("weight",
                              init::default_uniform({in_channels, out_channels / o.groups, kernel_size, kernel_size}, fan_in));
  if (o.bias) bias = register_parameter("bias", init::default_uniform({out_channels}, fan_in));
}

Tensor Conv2dTranspose::construct(const Tensor& x) {
  ConvOptions c;
  c.stride = {o_.stride, o_.stride};
  c.padding = {o_.padding, o_.padding};
  c.output_padding = {o_.output_padding, o_.output_padding};
  c.dilation = {o_.dilation, o_.dilation};
  c.groups = o_.groups;
  return conv_transpose2d(x, weight, bias, c);
}

BatchNorm1d::BatchNorm1d(int64_t features, double momentum, double eps) : momentum_(momentum), eps_(eps) {
  weight = register_parameter("weight", ones({features}));
  bias = register_parameter("bias", zeros({features}));
  running_mean = register_buffer("running_mean", zeros({features}));
  running_var = register_buffer("running_var", ones({features}));
}

Tensor BatchNorm1d::construct(const Tensor& x) {
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, "BatchNorm1d expects [N, C] or [N, C, L], got ", x.meta_str());
  return batch_norm(x, weight, bias, running_mean, running_var, training(), momentum_, eps_);
}

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine) : shape_(std::move(normalized_shape)), eps_(eps) {
  if (affine) {
    weight = register_parameter("weight", ones(shape_));
    bias = register_parameter("bias", zeros(shape_));
  }
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps) : groups_(groups), eps_(eps) {
  KILN_CHECK(groups > 0 && channels % groups == 0, "GroupNorm: channels (", channels,
             ") must be divisible by groups (", groups, ")");
  weight = register_parameter("weight", ones({channels}));
  bias = register_parameter("bias", zeros({channels}));
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx) : padding_idx_(padding_idx) {
  KILN_CHECK(num_embeddings > 0 && dim > 0, "Embedding(", num_embeddings, ", ", dim, "): sizes must be positive");
  KILN_CHECK(padding_idx_ < num_embeddings, "Embedding(", num_embeddings, ", ", dim, "): padding_idx ", padding_idx,
             " is not a row of the table");
  padding_idx_ = std::max<int64_t>(padding_idx_, -1);
  Tensor table = randn({num_embeddings, dim});
  if (padding_idx_ >= 0) table.select(0, padding_idx_).fill_(0.0);
  weight = register_parameter("weight", table);
}

CellList::CellList(std::vector<CellPtr> cells) {
  for (auto& c : cells) append(std::move(c));
}
void CellList::append(CellPtr cell) { add_child(std::to_string(children().size()), std::move(cell)); }
Tensor CellList::construct(const Tensor&) {
  KILN_FAIL("CellList holds cells but has no construct(); call its cells in your own construct()");
}

}  // namespace kiln::nn

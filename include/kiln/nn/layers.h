#pragma once
// More layers: 1-D convolution, transposed convolution, normalization,
// activations, average pooling, embedding, a list of cells.
#include <vector>

#include "kiln/nn.h"

namespace kiln::nn {

class Conv1d : public Cell {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Conv1d"; }
  Tensor weight, bias;

 private:
  Conv2dOptions o_;
};

struct ConvTransposeOptions {
  int64_t stride = 1, padding = 0, output_padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

class Conv2dTranspose : public Cell {
 public:
  Conv2dTranspose(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTransposeOptions options = {});
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "Conv2dTranspose"; }
  Tensor weight, bias;

 private:
  ConvTransposeOptions o_;
};

// Batch normalization over [N, C] or [N, C, L].
class BatchNorm1d : public Cell {
 public:
  explicit BatchNorm1d(int64_t features, double momentum = 0.1, double eps = 1e-5);
  Tensor construct(const Tensor& x) override;
  std::string type_name() const override { return "BatchNorm1d"; }
  Tensor weight, bias, running_mean, running_var;

 private:
  double momentum_, eps_;
};

class LayerNorm : public Cell {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  Tensor construct(const Tensor& x) override { return layer_norm(x, shape_, weight, bias, eps_); }
  std::string type_name() const override { return "LayerNorm"; }
  Tensor weight, bias;

 private:
  Shape shape_;
  double eps_;
};

class GroupNorm : public Cell {
 public:
  GroupNorm(int64_t groups, int64_t channels, double eps = 1e-5);
  Tensor construct(const Tensor& x) override { return group_norm(x, groups_, weight, bias, eps_); }
  std::string type_name() const override { return "GroupNorm"; }
  Tensor weight, bias;

 private:
  int64_t groups_;
  double eps_;
};

#define KILN_ACTIVATION_CELL(NAME, EXPR)                                 \
  class NAME : public Cell {                                             \
   public:                                                               \
    Tensor construct(const Tensor& x) override { return EXPR; }          \
    std::string type_name() const override { return #NAME; }            \
  };
KILN_ACTIVATION_CELL(SiLU, silu(x))
KILN_ACTIVATION_CELL(Sigmoid, sigmoid(x))
KILN_ACTIVATION_CELL(Tanh, tanh(x))
#undef KILN_ACTIVATION_CELL

class LeakyReLU : public Cell {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor construct(const Tensor& x) override { return leaky_relu(x, slope_); }
  std::string type_name() const override { return "LeakyReLU"; }

 private:
  double slope_;
};

class GELU : public Cell {
 public:
  explicit GELU(bool tanh_approximation = false) : tanh_(tanh_approximation) {}
  Tensor construct(const Tensor& x) override { return gelu(x, tanh_); }
  std::string type_name() const override { return "GELU"; }

 private:
  bool tanh_;
};

class Softmax : public Cell {
 public:
  explicit Softmax(int64_t axis = -1) : axis_(axis) {}
  Tensor construct(const Tensor& x) override { return softmax(x, axis_); }
  std::string type_name() const override { return "Softmax"; }

 private:
  int64_t axis_;
};

class LogSoftmax : public Cell {
 public:
  explicit LogSoftmax(int64_t axis = -1) : axis_(axis) {}
  Tensor construct(const Tensor& x) override { return log_softmax(x, axis_); }
  std::string type_name() const override { return "LogSoftmax"; }

 private:
  int64_t axis_;
};

class AvgPool2d : public Cell {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0)
      : k_(kernel_size), s_(stride ? stride : kernel_size), p_(padding) {}
  Tensor construct(const Tensor& x) override { return avg_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}); }
  std::string type_name() const override { return "AvgPool2d"; }

 private:
  int64_t k_, s_, p_;
};

// Resizes H and W by a factor, as PyTorch's nn.Upsample ("nearest" or "bilinear").
class Upsample : public Cell {
 public:
  explicit Upsample(double scale_factor, std::string mode = "nearest", bool align_corners = false)
      : scale_(scale_factor), mode_(std::move(mode)), align_corners_(align_corners) {}
  Tensor construct(const Tensor& x) override { return interpolate(x, scale_, mode_, align_corners_); }
  std::string type_name() const override { return "Upsample"; }

 private:
  double scale_;
  std::string mode_;
  bool align_corners_;
};

class Embedding : public Cell {
 public:
  // Weights ~ N(0, 1), as PyTorch; padding_idx >= 0: that row starts at zero
  // and is never trained (the padding token's); negative: none.
  Embedding(int64_t num_embeddings, int64_t dim, int64_t padding_idx = -1);
  Tensor construct(const Tensor& indices) override { return embedding(weight, indices, padding_idx_); }
  std::string type_name() const override { return "Embedding"; }
  Tensor weight;

 private:
  int64_t padding_idx_;
};

// Holds cells under the names "0", "1", ...; construct() is not defined for it.
class CellList : public Cell {
 public:
  CellList() = default;
  explicit CellList(std::vector<CellPtr> cells);
  void append(CellPtr cell);
  Cell& operator[](size_t i) { return *children().at(i).second; }
  size_t size() const { return children().size(); }
  Tensor construct(const Tensor&) override;
  std::string type_name() const override { return "CellList"; }
};

}  // namespace kiln::nn

#pragma once
// Recurrent layers as PyTorch's nn.LSTM, nn.GRU and nn.RNN: the same
// options, parameter names (weight_ih_l0, bias_hh_l1_reverse, ...), shapes and
// initialisation, so a torch state dict loads as it is. Input [T, N, I]
// ([N, T, I] with batch_first, [T, I] unbatched); states [layers * directions,
// N, H].
#include <string>

#include "kiln/functional.h"
#include "kiln/nn.h"

namespace kiln::nn {

struct RecurrentOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;  // on the outputs of every layer but the last, in training
  bool bidirectional = false;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
};

// output [T, N, D * H] (batch_first: [N, T, D * H]); h_n and c_n [D * L, N, H].
struct RecurrentResult {
  Tensor output, h_n, c_n;
};

class RecurrentLayer : public Cell {
 public:
  // construct() returns the output sequence.
  Tensor construct(const Tensor& x) override { return forward(x).output; }
  // h0 (and c0, LSTM only) may be undefined: zeros.
  RecurrentResult forward(const Tensor& x, const Tensor& h0 = Tensor(), const Tensor& c0 = Tensor());
  std::string type_name() const override { return kind_; }
  std::string extra_repr() const override;
  int64_t hidden_size() const { return hidden_; }

 protected:
  RecurrentLayer(std::string kind, int64_t gates, int64_t input_size, int64_t hidden_size, RecurrentOptions o);

 private:
  RecurrentOutput run(const Tensor& x, int64_t layer, int64_t direction, const Tensor& h0, const Tensor& c0);
  std::string kind_;
  int64_t input_, hidden_;
  RecurrentOptions o_;
  std::vector<Tensor> params_;  // w_ih, w_hh, b_ih, b_hh per (layer, direction); biases undefined without bias
};

class LSTM : public RecurrentLayer {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {})
      : RecurrentLayer("LSTM", 4, input_size, hidden_size, o) {}
};

class GRU : public RecurrentLayer {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {})
      : RecurrentLayer("GRU", 3, input_size, hidden_size, o) {}
};

// The Elman RNN: h' = tanh (or relu) of x W_ih^T + b_ih + h W_hh^T + b_hh.
class RNN : public RecurrentLayer {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RecurrentOptions o = {})
      : RecurrentLayer("RNN", 1, input_size, hidden_size, o) {}
};

}  // namespace kiln::nn

#include "kiln/nn/recurrent.h"

#include <cmath>

namespace kiln::nn {

namespace {
const std::string kWhich[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
}

RecurrentLayer::RecurrentLayer(std::string kind, int64_t gates, int64_t input_size, int64_t hidden_size,
                               RecurrentOptions o)
    : kind_(std::move(kind)), input_(input_size), hidden_(hidden_size), o_(std::move(o)) {
  KILN_CHECK(input_size > 0 && hidden_size > 0 && o_.num_layers > 0, kind_, "(", input_size, ", ", hidden_size,
             ", num_layers=", o_.num_layers, "): sizes and the layer count must be positive");
  KILN_CHECK(o_.dropout >= 0 && o_.dropout < 1, kind_, ": dropout must be in [0, 1), got ", o_.dropout);
  KILN_CHECK(o_.nonlinearity == "tanh" || o_.nonlinearity == "relu", kind_, ": nonlinearity '", o_.nonlinearity,
             "' is not one of tanh, relu");
  KILN_CHECK(kind_ == "RNN" || o_.nonlinearity == "tanh", kind_, " has no nonlinearity option (RNN has)");
  const int64_t dirs = o_.bidirectional ? 2 : 1;
  for (int64_t l = 0; l < o_.num_layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string suffix = "_l" + std::to_string(l) + (d ? "_reverse" : "");
      const int64_t in = l == 0 ? input_size : hidden_size * dirs;
      // PyTorch draws every parameter from U(-1/sqrt(H), 1/sqrt(H)).
      const Shape shapes[] = {{gates * hidden_size, in}, {gates * hidden_size, hidden_size}, {gates * hidden_size},
                              {gates * hidden_size}};
      for (int w = 0; w < 4; ++w)
        params_.push_back(w < 2 || o_.bias
                              ? register_parameter(kWhich[w] + suffix, init::default_uniform(shapes[w], hidden_size))
                              : Tensor());
    }
}

RecurrentOutput RecurrentLayer::run(const Tensor& x, int64_t layer, int64_t direction, const Tensor& h0,
                                    const Tensor& c0) {
  const Tensor* p = &params_[((layer * (o_.bidirectional ? 2 : 1)) + direction) * 4];
  const Tensor &w_ih = p[0], &w_hh = p[1], &b_ih = p[2], &b_hh = p[3];
  const bool reverse = direction == 1;
  if (kind_ == "LSTM") return lstm(x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse);
  if (kind_ == "GRU") return gru(x, w_ih, w_hh, b_ih, b_hh, h0, reverse);
  return rnn(x, w_ih, w_hh, b_ih, b_hh, h0, o_.nonlinearity, reverse);
}

RecurrentResult RecurrentLayer::forward(const Tensor& x_in, const Tensor& h0_in, const Tensor& c0_in) {
  const bool unbatched = x_in.dim() == 2;
  KILN_CHECK(unbatched || x_in.dim() == 3, kind_, " expects input [T, N, ", input_, "]",
             o_.batch_first ? " ([N, T, I] with batch_first)" : "", " or unbatched [T, ", input_, "], got ",
             x_in.meta_str());
  KILN_CHECK(x_in.shape().back() == input_, kind_, " was built for ", input_, " input features, got ", x_in.meta_str(),
             "; build it as ", kind_, "(", x_in.shape().back(), ", ", hidden_, ")");
  KILN_CHECK(kind_ == "LSTM" || !c0_in.defined(), kind_, " has no cell state: pass h0 only");
  Tensor x = unbatched ? x_in.unsqueeze(1) : (o_.batch_first ? x_in.transpose(0, 1) : x_in);
  const int64_t dirs = o_.bidirectional ? 2 : 1, layers = o_.num_layers, n = x.shape()[1];
  auto check_state = [&](const Tensor& s, const char* what) {
    if (!s.defined()) return s;
    Tensor b = unbatched ? s.unsqueeze(1) : s;
    KILN_CHECK(b.shape() == Shape({layers * dirs, n, hidden_}), kind_, ": ", what, " must be [num_layers * directions, N, hidden_size] = [",
               layers * dirs, ", ", n, ", ", hidden_, "], got ", s.meta_str());
    return b;
  };
  const Tensor h0 = check_state(h0_in, "h0"), c0 = check_state(c0_in, "c0");
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    if (l > 0 && o_.dropout > 0) x = dropout(x, o_.dropout, training());
    std::vector<Tensor> ys;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t at = l * dirs + d;
      RecurrentOutput r = run(x, l, d, h0.defined() ? h0.select(0, at) : Tensor(), c0.defined() ? c0.select(0, at) : Tensor());
      ys.push_back(r.y);
      h_n.push_back(r.h_n);
      if (r.c_n.defined()) c_n.push_back(r.c_n);
    }
    x = dirs == 1 ? ys[0] : concat(ys, 2);
  }
  RecurrentResult out{x, stack(h_n, 0), c_n.empty() ? Tensor() : stack(c_n, 0)};
  if (unbatched) {
    out.output = out.output.squeeze(1);
    out.h_n = out.h_n.squeeze(1);
    if (out.c_n.defined()) out.c_n = out.c_n.squeeze(1);
  } else if (o_.batch_first) {
    out.output = out.output.transpose(0, 1);
  }
  return out;
}

std::string RecurrentLayer::extra_repr() const {
  std::string s = std::to_string(input_) + ", " + std::to_string(hidden_);
  if (o_.num_layers != 1) s += ", num_layers=" + std::to_string(o_.num_layers);
  if (!o_.bias) s += ", bias=false";
  if (o_.batch_first) s += ", batch_first=true";
  if (o_.dropout > 0) s += ", dropout=" + std::to_string(o_.dropout);
  if (o_.bidirectional) s += ", bidirectional=true";
  if (o_.nonlinearity != "tanh") s += ", nonlinearity=" + o_.nonlinearity;
  return s;
}

}  // namespace kiln::nn

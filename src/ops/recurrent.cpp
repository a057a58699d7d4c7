// Recurrent layers, one layer and one direction per call: lstm, gru and rnn
// over a time-major sequence [T, N, I], with PyTorch's gate order and weight
// layout (so torch weights load as they are) and their backward ops. The
// nn layers stack layers and directions. Each op reads ONNX LSTM, GRU and RNN
// (every direction and layout, gates reordered) and writes them.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Grads;
using detail::Metas;

// Gates per kind, in PyTorch's order: LSTM i f g o, GRU r z n, RNN one.
struct Kind {
  const char* op;
  const char* onnx;
  int64_t gates;
  bool cell_state;   // LSTM's c
  int64_t reserve;   // values per hidden unit kept for backward (0: none)
  // ONNX's gate order (LSTM i o f c, GRU z r h): onnx_order[k] is the
  // PyTorch gate at ONNX position k.
  std::vector<int64_t> onnx_order;
  // ONNX's default activations for one direction (what PyTorch exports).
  std::vector<std::string> activations;
};
const Kind kLstm{"lstm", "LSTM", 4, true, 5, {0, 3, 1, 2}, {"Sigmoid", "Tanh", "Tanh"}};
const Kind kGru{"gru", "GRU", 3, false, 4, {1, 0, 2}, {"Sigmoid", "Tanh"}};
const Kind kRnn{"rnn", "RNN", 1, false, 0, {0}, {"Tanh"}};

// Inputs: x, w_ih, w_hh, b_ih?, b_hh?, h0? (, c0?).
Metas infer_recurrent(const Kind& k, const Metas& in, const Attrs& a) {
  detail::check_rank(in[0], 3, "x", "T, N, input_size: time first; nn layers transpose batch-first input");
  detail::check_floating(in[0], "x");
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i].defined) detail::check_same_dtype(in, 0, i);
  const int64_t t = in[0].shape[0], n = in[0].shape[1], input = in[0].shape[2];
  detail::check_rank(in[2], 2, "w_hh", "gates * hidden_size, hidden_size");
  const int64_t h = in[2].shape[1];
  const int64_t gh = k.gates * h;
  KILN_CHECK(in[2].shape[0] == gh, k.op, ": w_hh must be [", k.gates, " * hidden_size, hidden_size] = [", gh, ", ", h,
             "], got ", shape_str(in[2].shape));
  KILN_CHECK(in[1].shape == Shape({gh, input}), k.op, ": w_ih must be [", k.gates, " * hidden_size, input_size] = [",
             gh, ", ", input, "] for x of shape ", shape_str(in[0].shape), ", got ", shape_str(in[1].shape));
  for (int i : {3, 4})
    KILN_CHECK(!in[i].defined || in[i].shape == Shape({gh}), k.op, ": ", i == 3 ? "b_ih" : "b_hh", " must be [",
               gh, "], got ", shape_str(in[i].shape));
  for (size_t i = 5; i < in.size(); ++i)
    KILN_CHECK(!in[i].defined || in[i].shape == Shape({n, h}), k.op, ": ", i == 5 ? "h0" : "c0",
               " must be [N, hidden_size] = [", n, ", ", h, "], got ", shape_str(in[i].shape));
  if (k.op == std::string("rnn")) {
    const std::string f = a.get_string("nonlinearity", "tanh");
    KILN_CHECK(f == "tanh" || f == "relu", "rnn: nonlinearity '", f, "' is not one of tanh, relu");
  }
  const TensorMeta& x = in[0];
  Metas out = {{true, {t, n, h}, x.dtype, x.device}, {true, {n, h}, x.dtype, x.device}};
  if (k.cell_state) out.push_back({true, {n, h}, x.dtype, x.device});
  if (k.reserve) out.push_back({true, {t, n, k.reserve * h}, x.dtype, x.device});
  return out;
}

// --- ONNX -------------------------------------------------------------------

// ONNX-ordered gate rows of `w` ([gates * H, ...] or [gates * H]) in
// PyTorch's order (the reader), and the rows of PyTorch-ordered weights in
// ONNX's order as indices (the writer).
Tensor torch_gates(const Kind& k, const Tensor& w) {
  if (k.gates == 1) return w;
  const int64_t h = w.shape()[0] / k.gates;
  std::vector<Tensor> parts(k.gates);
  for (int64_t at = 0; at < k.gates; ++at) parts[k.onnx_order[at]] = w.slice(0, at * h, (at + 1) * h);
  return concat(parts, 0);
}
std::vector<int64_t> gate_rows(const Kind& k, int64_t h) {
  std::vector<int64_t> rows;
  for (int64_t g : k.onnx_order)
    for (int64_t j = 0; j < h; ++j) rows.push_back(g * h + j);
  return rows;
}

// One direction as a one-direction ONNX node; Y [T, 1, N, H] and the states
// [1, N, H] squeezed back to Kiln's shapes.
void write_recurrent(const Kind& k, OnnxWriter& w) {
  w.require_unused_from(k.cell_state ? 3 : 2, "the values saved for backward");
  const Attrs& a = w.attrs();
  const int64_t h = w.in_shape(2)[1];
  std::string rows = w.ints(gate_rows(k, h), "gate_rows");
  std::string zero = w.ints({0}, "axis0"), one = w.ints({1}, "axis1");
  auto gathered = [&](size_t i, const std::string& hint) {
    std::string g = w.unique(hint);
    w.node("Gather", {w.in(i), rows}, {g}, {{"axis", int64_t{0}}});
    return g;
  };
  auto unsqueezed = [&](const std::string& v, const std::string& hint) {
    std::string u = w.unique(hint);
    w.node("Unsqueeze", {v, zero}, {u});
    return u;
  };
  std::string bias;
  if (!w.in(3).empty() || !w.in(4).empty()) {
    const Shape gh = {k.gates * h};
    std::string both = w.unique("bias");
    std::string b_ih = w.in(3).empty() ? w.filled(gh, 0, w.dtype(), "b_ih") : w.in(3);
    std::string b_hh = w.in(4).empty() ? w.filled(gh, 0, w.dtype(), "b_hh") : w.in(4);
    std::string gi = w.unique("b_ih"), gh_ = w.unique("b_hh");
    w.node("Gather", {b_ih, rows}, {gi}, {{"axis", int64_t{0}}});
    w.node("Gather", {b_hh, rows}, {gh_}, {{"axis", int64_t{0}}});
    w.node("Concat", {gi, gh_}, {both}, {{"axis", int64_t{0}}});
    bias = unsqueezed(both, "B");
  }
  std::vector<std::string> inputs = {w.in(0), unsqueezed(gathered(1, "w_ih"), "W"),
                                     unsqueezed(gathered(2, "w_hh"), "R"), bias, "",
                                     w.in(5).empty() ? "" : unsqueezed(w.in(5), "initial_h")};
  if (k.cell_state) inputs.push_back(w.in(6).empty() ? "" : unsqueezed(w.in(6), "initial_c"));
  Attrs attrs{{"hidden_size", h}, {"direction", std::string(a.get_bool("reverse", false) ? "reverse" : "forward")}};
  if (k.op == std::string("gru")) attrs.set("linear_before_reset", int64_t{a.get_bool("linear_before_reset", true)});
  if (k.op == std::string("rnn") && a.get_string("nonlinearity", "tanh") == "relu")
    attrs.set("activations", std::vector<std::string>{"Relu"});
  std::vector<std::string> outs = {w.unique("Y"), w.unique("Y_h")};
  if (k.cell_state) outs.push_back(w.unique("Y_c"));
  w.node(k.onnx, inputs, outs, attrs);
  w.node("Squeeze", {outs[0], one}, {w.out(0)});
  for (size_t i = 1; i < outs.size(); ++i) w.node("Squeeze", {outs[i], zero}, {w.out(i)});
}

// One direction of an ONNX LSTM, GRU or RNN as a loop of Kiln ops over the
// time steps, in ONNX's gate order: for what the fused ops do not take, LSTM
// peepholes (P) and sequence_lens shorter than the sequence. A sequence's
// steps past its length keep the state and give zero outputs; run in reverse,
// its first steps are the last ones within its length, as ONNX defines.
// x [T, N, I], w [G*H, I], r [G*H, H], b [2*G*H] or undefined, p [3*H] or
// undefined, lengths [N, 1] int64 or undefined. Returns y [T, N, H], h (, c).
std::vector<Tensor> recurrent_steps(const Kind& k, const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& b,
                                    const Tensor& p, const Tensor& lengths, Tensor h, Tensor c, bool reverse,
                                    bool linear_before_reset, const std::string& nonlinearity) {
  const int64_t steps = x.shape()[0], batch = x.shape()[1], hidden = r.shape()[1], gh = k.gates * hidden;
  const DType dt = x.dtype();
  if (!h.defined()) h = zeros({batch, hidden}, dt, x.device());
  if (k.cell_state && !c.defined()) c = zeros({batch, hidden}, dt, x.device());
  const Tensor wb = b.defined() ? b.slice(0, 0, gh) : zeros({gh}, dt, x.device());
  const Tensor rb = b.defined() ? b.slice(0, gh, 2 * gh) : zeros({gh}, dt, x.device());
  const Tensor projected = matmul(x, w.transpose(0, 1)) + wb;  // every step's input part at once
  const Tensor rt = r.transpose(0, 1);
  auto gate = [&](const Tensor& t, int64_t g) { return t.slice(1, g * hidden, (g + 1) * hidden); };
  std::vector<Tensor> ys(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const Tensor xt = projected.select(0, t);
    Tensor h_new, c_new;
    if (k.cell_state) {  // i o f c
      const Tensor z = xt + matmul(h, rt) + rb;
      const Tensor pi = p.defined() ? p.slice(0, 0, hidden) * c : Tensor(), pf = p.defined() ? p.slice(0, 2 * hidden, 3 * hidden) * c : Tensor();
      const Tensor i = sigmoid(p.defined() ? gate(z, 0) + pi : gate(z, 0));
      const Tensor f = sigmoid(p.defined() ? gate(z, 2) + pf : gate(z, 2));
      c_new = f * c + i * tanh(gate(z, 3));
      const Tensor o = sigmoid(p.defined() ? gate(z, 1) + p.slice(0, hidden, 2 * hidden) * c_new : gate(z, 1));
      h_new = o * tanh(c_new);
    } else if (k.gates == 3) {  // z r h
      // The hidden state's product for the h gate only where it comes before the reset.
      const Tensor hr = matmul(h, linear_before_reset ? rt : rt.slice(1, 0, 2 * hidden));
      const Tensor zg = sigmoid(gate(xt, 0) + gate(hr, 0) + rb.slice(0, 0, hidden));
      const Tensor rg = sigmoid(gate(xt, 1) + gate(hr, 1) + rb.slice(0, hidden, 2 * hidden));
      const Tensor rbh = rb.slice(0, 2 * hidden, 3 * hidden);
      const Tensor candidate = linear_before_reset
                                   ? tanh(gate(xt, 2) + rg * (gate(hr, 2) + rbh))
                                   : tanh(gate(xt, 2) + matmul(rg * h, rt.slice(1, 2 * hidden, 3 * hidden)) + rbh);
      h_new = (ones({}, dt) - zg) * candidate + zg * h;
    } else {
      const Tensor z = xt + matmul(h, rt) + rb;
      h_new = nonlinearity == "relu" ? relu(z) : tanh(z);
    }
    if (lengths.defined()) {
      const Tensor live = lt(scalar_tensor(static_cast<double>(t), DType::Int64), lengths);  // [N, 1]
      h = where(live, h_new, h);
      if (k.cell_state) c = where(live, c_new, c);
      ys[static_cast<size_t>(t)] = where(live, h_new, zeros({}, dt));
    } else {
      h = h_new;
      c = c_new;
      ys[static_cast<size_t>(t)] = h_new;
    }
  }
  std::vector<Tensor> out = {stack(ys, 0), h};
  if (k.cell_state) out.push_back(c);
  return out;
}

// ONNX LSTM/GRU/RNN: X, W, R, B, sequence_lens, initial_h (, initial_c, P).
std::vector<Tensor> read_recurrent(const Kind& k, const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor& x_in = n.input(in, 0);
  const Tensor& w = n.input(in, 1);
  const Tensor& r = n.input(in, 2);
  if (x_in.dim() != 3 || w.dim() != 3 || r.dim() != 3) n.fail("X, W and R must have rank 3");
  const std::string direction = n.s("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    n.fail("direction '", direction, "' is not one of forward, reverse, bidirectional");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t h = r.shape()[2];
  if (n.has("hidden_size") && n.i("hidden_size", h) != h)
    n.fail("hidden_size ", n.i("hidden_size", h), " does not match R's shape ", shape_str(r.shape()));
  if (w.shape()[0] != dirs || r.shape()[0] != dirs)
    n.fail("W and R must have ", dirs, " direction(s) on axis 0 for direction ", direction);
  if (n.has("clip")) n.unsupported("the clip attribute is not supported");
  if (n.i("input_forget", 0)) n.unsupported("input_forget=1 is not supported");
  if (n.has("activation_alpha") || n.has("activation_beta")) n.unsupported("activation_alpha/beta are not supported");
  std::string nonlinearity = "tanh";
  if (n.has("activations")) {
    // Only the defaults (and Relu for RNN) are supported: PyTorch exports nothing else.
    const std::vector<std::string>& defaults = k.activations;
    const std::vector<std::string> acts = n.strings("activations");
    for (size_t i = 0; i < acts.size(); ++i) {
      const std::string& want = defaults[i % defaults.size()];
      if (k.gates == 1 && (acts[i] == "Relu" || acts[i] == "Tanh")) {
        if (i > 0 && (acts[i] == "Relu") != (nonlinearity == "relu"))
          n.unsupported("different activations per direction are not supported");
        nonlinearity = acts[i] == "Relu" ? "relu" : "tanh";
        continue;
      }
      if (acts[i] != want) n.unsupported("activation ", acts[i], " is not supported (", want, " is)");
    }
  }
  const bool batch_first = n.i("layout", 0) == 1;
  Tensor x = batch_first ? x_in.transpose(0, 1) : x_in;
  const int64_t t = x.shape()[0];
  // Lengths shorter than the sequence and peepholes take the loop of ops.
  bool stepwise = false;
  Tensor lengths;
  if (in.size() > 4 && in[4].defined()) {
    lengths = cast(in[4], DType::Int64).reshape({x.shape()[1], 1});
    for (int64_t len : lengths.contiguous().to_vector<int64_t>()) {
      if (len < 0 || len > t) n.fail("sequence_lens holds ", len, "; lengths run from 0 to the sequence's ", t);
      stepwise = stepwise || len != t;
    }
  }
  Tensor peepholes;
  if (k.cell_state && in.size() > 7 && in[7].defined()) {
    if (in[7].shape() != Shape({dirs, 3 * h})) n.fail("P must be [", dirs, ", ", 3 * h, "], got ", shape_str(in[7].shape()));
    for (double v : in[7].to(DType::Float64).contiguous().to_vector<double>())
      if (v != 0) peepholes = in[7];
    stepwise = stepwise || peepholes.defined();
  }
  auto state = [&](size_t i, int64_t d) {
    if (in.size() <= i || !in[i].defined()) return Tensor();
    Tensor s = in[i];
    return batch_first ? s.select(1, d) : s.select(0, d);
  };
  std::vector<Tensor> ys, hs, cs;
  const int64_t gh = k.gates * h;
  for (int64_t d = 0; d < dirs; ++d) {
    Tensor b_ih, b_hh;
    if (in.size() > 3 && in[3].defined()) {
      Tensor b = in[3].select(0, d);
      b_ih = torch_gates(k, b.slice(0, 0, gh));
      b_hh = torch_gates(k, b.slice(0, gh, 2 * gh));
    }
    const bool reverse = direction == "reverse" || d == 1;
    std::vector<Tensor> out;
    if (stepwise) {
      out = recurrent_steps(k, x, w.select(0, d), r.select(0, d), in.size() > 3 && in[3].defined() ? in[3].select(0, d) : Tensor(),
                            peepholes.defined() ? peepholes.select(0, d) : Tensor(), lengths, state(5, d),
                            k.cell_state ? state(6, d) : Tensor(), reverse, n.i("linear_before_reset", 0) != 0,
                            nonlinearity);
    } else {
      std::vector<Tensor> args = {x, torch_gates(k, w.select(0, d)), torch_gates(k, r.select(0, d)), b_ih, b_hh,
                                  state(5, d)};
      if (k.cell_state) args.push_back(state(6, d));
      Attrs a{{"reverse", reverse}};
      if (k.gates == 3) a.set("linear_before_reset", n.i("linear_before_reset", 0) != 0);
      if (k.gates == 1) a.set("nonlinearity", nonlinearity);
      out = call(k.op, args, a);
    }
    ys.push_back(out[0]);
    hs.push_back(out[1]);
    if (k.cell_state) cs.push_back(out[2]);
  }
  // Y [T, D, N, H] (layout 1: [N, T, D, H]); states [D, N, H] ([N, D, H]).
  Tensor y = stack(ys, 1);
  if (batch_first) y = y.permute({2, 0, 1, 3});
  const int64_t state_axis = batch_first ? 1 : 0;
  std::vector<Tensor> result = {y, stack(hs, state_axis)};
  if (k.cell_state) result.push_back(stack(cs, state_axis));
  return result;
}

// sequence_lens (4) and P (7) are checked by value.
OnnxImport recurrent_reader(const Kind& k) {
  return onnx_reader({k.onnx}, [&k](const OnnxReader& n, const std::vector<Tensor>& in) { return read_recurrent(k, n, in); },
                     {4, 7});
}

// MindSpore's LSTM primitive: x [T, N, I] (time first), h0 and c0
// [layers * directions, N, H], and one flat weight holding, for each layer
// and direction in turn, w_ih [4H, in] and w_hh [4H, H] (gates i, f, g, o),
// then the biases for each layer and direction: b_ih and b_hh [4H] each, or
// their sum (the CPU kernel's form), or none.
std::vector<Tensor> read_mindspore_lstm(const OnnxReader& n, const std::vector<Tensor>& in) {
  const Tensor &x = n.input(in, 0), &h0 = n.input(in, 1), &c0 = n.input(in, 2);
  const Tensor w = n.input(in, 3).reshape({-1});
  const int64_t input = n.required_i("input_size"), hidden = n.required_i("hidden_size"), layers = n.i("num_layers", 1);
  const int64_t dirs = n.i("bidirectional", 0) != 0 ? 2 : 1, gates = 4 * hidden, pairs = layers * dirs;
  if (x.dim() != 3 || x.shape()[2] != input) n.fail("x should be [T, N, ", input, "], got ", x.meta_str());
  const Shape state = {pairs, x.shape()[1], hidden};
  if (h0.shape() != state || c0.shape() != state) n.fail("h0 and c0 should be ", shape_str(state), ", got ", h0.meta_str(), " and ", c0.meta_str());
  int64_t weights = 0;
  for (int64_t l = 0; l < layers; ++l) weights += dirs * gates * ((l == 0 ? input : hidden * dirs) + hidden);
  const int64_t biases = pairs * gates;
  int bias_sets = -1;
  for (int k = 0; k <= 2; ++k)
    if (w.numel() == weights + k * biases) bias_sets = k;
  if (bias_sets < 0)
    n.fail("the flat weight holds ", w.numel(), " values; ", weights, " weights and 0, 1 or 2 sets of ", biases,
           " biases were expected for input_size ", input, ", hidden_size ", hidden, ", ", layers, " layer(s), ", dirs,
           " direction(s)");
  int64_t at = 0;
  auto take = [&](const Shape& s) {
    int64_t count = 1;
    for (int64_t d : s) count *= d;
    Tensor t = w.slice(0, at, at + count).reshape(s);
    at += count;
    return t;
  };
  std::vector<Tensor> w_ih(pairs), w_hh(pairs), b_ih(pairs), b_hh(pairs);
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t d = 0; d < dirs; ++d) {
      w_ih[l * dirs + d] = take({gates, l == 0 ? input : hidden * dirs});
      w_hh[l * dirs + d] = take({gates, hidden});
    }
  for (int64_t p = 0; p < pairs && bias_sets > 0; ++p) {
    b_ih[p] = take({gates});
    if (bias_sets == 2) b_hh[p] = take({gates});
  }
  Tensor layer_input = x;
  std::vector<Tensor> h_n, c_n;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<Tensor> ys;
    for (int64_t d = 0; d < dirs; ++d) {
      const int64_t p = l * dirs + d;
      RecurrentOutput o = lstm(layer_input, w_ih[p], w_hh[p], b_ih[p], b_hh[p], h0.select(0, p), c0.select(0, p), d == 1);
      ys.push_back(o.y);
      h_n.push_back(o.h_n);
      c_n.push_back(o.c_n);
    }
    layer_input = dirs == 1 ? ys[0] : concat(ys, 2);
  }
  return {layer_input, stack(h_n, 0), stack(c_n, 0)};
}

// One call of lstm, gru or rnn as a loop of ops over the time steps, in
// PyTorch's gate order (LSTM i f g o, GRU r z n): how a device without a
// recurrent kernel runs it, on its own GEMMs and elementwise kernels, with
// autograd through those ops. The reserve output, which only the fused
// kernels' backward reads, is zeros.
std::vector<Tensor> decomposed(const Kind& k, const std::vector<Tensor>& in, const Attrs& attrs) {
  auto given = [&](size_t i) { return in.size() > i && in[i].defined() ? in[i] : Tensor(); };
  const Tensor &x = in[0], &w_ih = in[1], &w_hh = in[2];
  const Tensor b_ih = given(3), b_hh = given(4);
  const int64_t steps = x.shape()[0], batch = x.shape()[1], hidden = w_hh.shape()[1];
  Tensor h = given(5).defined() ? given(5) : zeros({batch, hidden}, x.dtype(), x.device());
  Tensor c = k.cell_state ? (given(6).defined() ? given(6) : zeros({batch, hidden}, x.dtype(), x.device())) : Tensor();
  const bool reverse = attrs.get_bool("reverse", false);
  const bool linear_before_reset = attrs.get_bool("linear_before_reset", true);
  const bool relu_rnn = attrs.get_string("nonlinearity", "tanh") == "relu";
  Tensor projected = matmul(x, w_ih.transpose(0, 1));  // every step's input part at once
  if (b_ih.defined()) projected = projected + b_ih;
  const Tensor w_hh_t = w_hh.transpose(0, 1);
  auto gate = [&](const Tensor& t, int64_t g) { return t.slice(1, g * hidden, (g + 1) * hidden); };
  std::vector<Tensor> ys(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const Tensor xt = projected.select(0, t);
    if (k.gates == 3 && !linear_before_reset) {  // the reset gate applies before the hidden product
      Tensor hr = matmul(h, w_hh_t.slice(1, 0, 2 * hidden));
      if (b_hh.defined()) hr = hr + b_hh.slice(0, 0, 2 * hidden);
      const Tensor r = sigmoid(gate(xt, 0) + gate(hr, 0)), z = sigmoid(gate(xt, 1) + gate(hr, 1));
      Tensor hn = matmul(r * h, w_hh_t.slice(1, 2 * hidden, 3 * hidden));
      if (b_hh.defined()) hn = hn + b_hh.slice(0, 2 * hidden, 3 * hidden);
      h = (1.0 - z) * tanh(gate(xt, 2) + hn) + z * h;
    } else {
      Tensor hr = matmul(h, w_hh_t);
      if (b_hh.defined()) hr = hr + b_hh;
      if (k.cell_state) {
        c = sigmoid(gate(xt, 1) + gate(hr, 1)) * c +
            sigmoid(gate(xt, 0) + gate(hr, 0)) * tanh(gate(xt, 2) + gate(hr, 2));
        h = sigmoid(gate(xt, 3) + gate(hr, 3)) * tanh(c);
      } else if (k.gates == 3) {
        const Tensor r = sigmoid(gate(xt, 0) + gate(hr, 0)), z = sigmoid(gate(xt, 1) + gate(hr, 1));
        h = (1.0 - z) * tanh(gate(xt, 2) + r * gate(hr, 2)) + z * h;
      } else {
        h = relu_rnn ? relu(xt + hr) : tanh(xt + hr);
      }
    }
    ys[static_cast<size_t>(t)] = h;
  }
  std::vector<Tensor> out = {stack(ys, 0), h};
  if (k.cell_state) out.push_back(c);
  if (k.reserve) out.push_back(zeros({steps, batch, k.reserve * hidden}, x.dtype(), x.device()));
  return out;
}

// --- definitions -----------------------------------------------------------

OpDef recurrent_op(const Kind& k, std::vector<std::string> attrs) {
  OpDef d;
  d.name = k.op;
  d.inputs = {"x", "w_ih", "w_hh", "b_ih?", "b_hh?", "h0?"};
  if (k.cell_state) d.inputs.push_back("c0?");
  d.outputs = {"y", "h_n"};
  if (k.cell_state) d.outputs.push_back("c_n");
  if (k.reserve) d.outputs.push_back("reserve");
  d.attrs = std::move(attrs);
  d.infer = [&k](const Metas& in, const Attrs& a) { return infer_recurrent(k, in, a); };
  d.onnx = {{k.onnx, "Gather", "Concat", "Unsqueeze", "Squeeze"}, [&k](OnnxWriter& w) { write_recurrent(k, w); }};
  d.onnx_import = recurrent_reader(k);
  if (&k == &kLstm) d.mindspore_import = onnx_reader({"LSTM"}, read_mindspore_lstm);
  d.category = "recurrent";
  d.decompose = [&k](const std::vector<Tensor>& in, const Attrs& a) { return decomposed(k, in, a); };
  // Inputs a..: grad_y, grad_h_n?, (grad_c_n?), then the forward's x, w_ih,
  // w_hh, h0?, (c0?), y, (reserve); outputs one gradient per forward input.
  d.grad = [&k](const GradContext& c, const Grads& g) -> Grads {
    std::vector<Tensor> args = {g[0], g[1]};
    if (k.cell_state) args.push_back(g[2]);
    args.insert(args.end(), {c.inputs[0], c.inputs[1], c.inputs[2], c.inputs[5]});
    if (k.cell_state) args.push_back(c.inputs[6]);
    args.push_back(c.outputs[0]);
    if (k.reserve) args.push_back(c.outputs.back());
    std::vector<Tensor> grads = call(std::string(k.op) + "_backward", args, c.attrs);
    for (size_t i = 3; i < grads.size(); ++i)
      if (!c.inputs[i].defined()) grads[i] = Tensor();
    return grads;
  };
  return d;
}

OpDef recurrent_backward_op(const Kind& k, std::vector<std::string> attrs) {
  OpDef d;
  d.name = std::string(k.op) + "_backward";
  d.inputs = {"grad_y", "grad_h_n?"};
  if (k.cell_state) d.inputs.push_back("grad_c_n?");
  d.inputs.insert(d.inputs.end(), {"x", "w_ih", "w_hh", "h0?"});
  if (k.cell_state) d.inputs.push_back("c0?");
  d.inputs.push_back("y");
  if (k.reserve) d.inputs.push_back("reserve");
  d.outputs = {"grad_x", "grad_w_ih", "grad_w_hh", "grad_b_ih", "grad_b_hh", "grad_h0"};
  if (k.cell_state) d.outputs.push_back("grad_c0");
  d.attrs = std::move(attrs);
  d.infer = [&k](const Metas& in, const Attrs&) -> Metas {
    const size_t x = k.cell_state ? 3 : 2;
    const TensorMeta& w_hh = in[x + 2];
    const Shape state = {in[x].shape[1], w_hh.shape[1]};
    Metas out = {in[x], in[x + 1], w_hh};
    for (int i = 0; i < 2; ++i) out.push_back({true, {w_hh.shape[0]}, w_hh.dtype, w_hh.device});
    out.push_back({true, state, w_hh.dtype, w_hh.device});
    if (k.cell_state) out.push_back({true, state, w_hh.dtype, w_hh.device});
    return out;
  };
  d.tags = kTagBackward | kTagNondifferentiable;
  d.category = "recurrent";
  return d;
}

const std::vector<std::string> kLstmAttrs = {"reverse:bool=false"};
const std::vector<std::string> kGruAttrs = {"reverse:bool=false", "linear_before_reset:bool=true"};
const std::vector<std::string> kRnnAttrs = {"reverse:bool=false", "nonlinearity:string=tanh"};

OpDefiner d_lstm(recurrent_op(kLstm, kLstmAttrs));
OpDefiner d_lstm_bw(recurrent_backward_op(kLstm, kLstmAttrs));
OpDefiner d_gru(recurrent_op(kGru, kGruAttrs));
OpDefiner d_gru_bw(recurrent_backward_op(kGru, kGruAttrs));
OpDefiner d_rnn(recurrent_op(kRnn, kRnnAttrs));
OpDefiner d_rnn_bw(recurrent_backward_op(kRnn, kRnnAttrs));

}  // namespace

RecurrentOutput lstm(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                     const Tensor& h0, const Tensor& c0, bool reverse) {
  auto out = call(KILN_OP("lstm"), {x, w_ih, w_hh, b_ih, b_hh, h0, c0}, {{"reverse", reverse}});
  return {out[0], out[1], out[2]};
}

RecurrentOutput gru(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                    const Tensor& h0, bool reverse) {
  auto out = call(KILN_OP("gru"), {x, w_ih, w_hh, b_ih, b_hh, h0}, {{"reverse", reverse}});
  return {out[0], out[1], Tensor()};
}

RecurrentOutput rnn(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                    const Tensor& h0, const std::string& nonlinearity, bool reverse) {
  auto out = call(KILN_OP("rnn"), {x, w_ih, w_hh, b_ih, b_hh, h0}, {{"reverse", reverse}, {"nonlinearity", nonlinearity}});
  return {out[0], out[1], Tensor()};
}

}  // namespace kiln

// Inference graphs' float32 recurrent layers on weights prepared once: the
// input side's W_ih in packed_linear's panels with its bias summed, W_hh in
// recurrent panels. The kernel would otherwise transpose W_hh into panels
// and run a library GEMM and a pass adding the biases on every call.
#include "backends/cpu/packed_linear.h"
#include "backends/cpu/passes/cpu_passes.h"
#include "backends/cpu/rnn_kernels.h"
#include "graph/derived_constants.h"
#include "kiln/grad_mode.h"

namespace kiln::graph {

std::string use_prepared_recurrent_weights(Graph& g) {
  size_t prepared = 0;
  for (auto& n : g.nodes) {
    if (n.removed || !n.op || !(n.is_op("lstm") || n.is_op("gru") || n.is_op("rnn"))) continue;
    const std::string op = n.op->name;
    if (n.inputs.size() != (op == "lstm" ? 7u : 6u)) continue;  // (the prepared tensors follow the op's own inputs)
    auto constant = [&](int i) {
      if (n.inputs[i] < 0) return i >= 3;  // (biases may be omitted)
      const Value& v = g.values[n.inputs[i]];
      return v.kind == ValueKind::Constant && v.meta.dtype == DType::Float32;
    };
    if (!constant(1) || !constant(2) || !constant(3) || !constant(4)) continue;
    if (g.values[n.inputs[0]].meta.dtype != DType::Float32) continue;
    const Tensor w_ih = g.values[n.inputs[1]].tensor, w_hh = g.values[n.inputs[2]].tensor;
    const int64_t gates = w_ih.shape()[0], input = w_ih.shape()[1], hidden = w_hh.shape()[1];
    const bool before_reset = n.attrs.get_bool("linear_before_reset", true);
    NoGradGuard no_grad;
    std::vector<int> biases;
    for (int i : {3, 4})
      if (n.inputs[i] >= 0) biases.push_back(n.inputs[i]);
    const int input_panels = add_derived_constant(g, n.inputs[1], "linear panels", ".panels", [&] {
      Tensor t = Tensor::empty({cpu::packed_linear_weights_size(gates, input)});
      cpu::pack_linear_weights(w_ih.contiguous().data<float>(), gates, input, t.data<float>());
      return t;
    });
    // (Without biases, zeros derived from W_ih.)
    const std::string bias_kind = op + " input bias" + (before_reset ? "" : ", n gate after reset") +
                                  (n.inputs[3] >= 0 ? " b_ih" : "") + (n.inputs[4] >= 0 ? " b_hh" : "");
    const int input_bias =
        add_derived_constant(g, biases.empty() ? std::vector<int>{n.inputs[1]} : biases, bias_kind, ".input_bias", [&] {
          const Tensor b_ih = n.inputs[3] >= 0 ? g.values[n.inputs[3]].tensor : Tensor();
          const Tensor b_hh = n.inputs[4] >= 0 ? g.values[n.inputs[4]].tensor : Tensor();
          return cpu::recurrent_input_bias(op, b_ih, b_hh, hidden, before_reset);
        });
    // (GRU with the reset gate before its hidden product runs two products a
    // step along W_hh's columns, not on panels.)
    const bool panels = op != "gru" || before_reset;
    const int hidden_panels =
        add_derived_constant(g, n.inputs[2], panels ? "recurrent panels" : "no recurrent panels", ".panels",
                             [&] { return panels ? cpu::recurrent_hidden_panels(w_hh) : Tensor::empty({0}); });
    n.inputs.insert(n.inputs.end(), {input_panels, input_bias, hidden_panels});
    const Attrs attrs = n.attrs;
    n.custom = [op, attrs](const std::vector<Tensor>& in, std::vector<Tensor>& out) {
      cpu::recurrent_forward_prepared(op, in, out, attrs);
    };
    n.any_shape = true;  // (every size from its tensors)
    n.label = op + " (prepared weights)";
    n.fused_from = n.op;
    n.op = nullptr;
    ++prepared;
  }
  return prepared ? "gave " + std::to_string(prepared) + " recurrent layers weights prepared once" : "";
}

}  // namespace kiln::graph

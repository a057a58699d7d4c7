#pragma once
// Recurrent layers (lstm, gru, rnn) in inference on weights prepared once:
// the CPU pass "recurrent weights prepared" appends to the op's inputs W_ih in
// packed_linear's panels, the input side's bias and W_hh in recurrent
// panels (recurrent_panels.h), which the kernel would otherwise make on
// every call.
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln::cpu {

// b_ih plus the part of b_hh that adds to the input side (all of it but
// GRU's n gate with linear_before_reset); either may be undefined.
Tensor recurrent_input_bias(const std::string& op, const Tensor& b_ih, const Tensor& b_hh, int64_t hidden,
                            bool linear_before_reset);
// W_hh [gates * hidden, hidden] in recurrent panels.
Tensor recurrent_hidden_panels(const Tensor& w_hh);

// op's float32 forward on its inputs followed by the three prepared tensors.
void recurrent_forward_prepared(const std::string& op, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                                const Attrs& a);

}  // namespace kiln::cpu

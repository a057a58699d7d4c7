// Fused in-place optimizer updates: one pass over a parameter, its gradient
// and its state instead of a chain of elementwise ops with temporaries. The
// learning rate and the step count are 0-d float64 tensors, read when the op
// runs, so a compiled training step follows schedules without recompiling.
// The optional last input is the step's loss: the update is skipped when it is
// not finite, as eager training skips it.
#include "ops/op_helpers.h"

namespace kiln {
namespace {
using detail::Metas;

// Checks that every given input from index 1 on (except the scalars at `scalars`)
// has the parameter's shape and dtype.
void check_update(const Metas& in, std::initializer_list<size_t> scalars) {
  detail::check_floating(in[0], "param");
  for (size_t i = 1; i < in.size(); ++i) {
    if (!in[i].defined) continue;
    bool scalar = false;
    for (size_t s : scalars) scalar = scalar || s == i;
    if (i + 1 == in.size() && in[i].shape.empty() && !scalar) {
      KILN_CHECK(is_floating(in[i].dtype), "loss must be a floating 0-d tensor");
    } else if (scalar) {
      KILN_CHECK(in[i].shape.empty() && in[i].dtype == DType::Float64, "input ", i,
                 " must be a 0-d float64 tensor (learning rate or step), got ", dtype_name(in[i].dtype),
                 shape_str(in[i].shape));
    } else {
      KILN_CHECK(in[i].shape == in[0].shape && in[i].dtype == in[0].dtype, "input ", i, " must match the parameter (",
                 dtype_name(in[0].dtype), shape_str(in[0].shape), "), got ", dtype_name(in[i].dtype),
                 shape_str(in[i].shape));
    }
  }
}

OpDef update_op(const char* name, std::vector<std::string> inputs, std::vector<std::string> attrs,
                std::vector<int> writes) {
  OpDef d;
  d.name = name;
  d.inputs = std::move(inputs);
  d.outputs = {};
  d.attrs = std::move(attrs);
  d.writes = std::move(writes);
  d.tags = kTagNondifferentiable;
  return d;
}

OpDefiner d_sgd([] {
  OpDef d = update_op("sgd_update", {"param", "grad", "momentum_buffer?", "lr", "loss?"},
                      {"momentum:float=0", "nesterov:bool=false", "weight_decay:float=0"}, {0, 2});
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    check_update(in, {3});
    return {};
  };
  return d;
}());

OpDefiner d_adam([] {
  OpDef d = update_op("adam_update", {"param", "grad", "exp_avg", "exp_avg_sq", "lr", "step", "loss?"},
                      {"beta1:float", "beta2:float", "eps:float", "weight_decay:float=0", "decoupled:bool=false"},
                      {0, 2, 3});
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    check_update(in, {4, 5});
    return {};
  };
  return d;
}());

OpDefiner d_rmsprop([] {
  OpDef d = update_op("rmsprop_update", {"param", "grad", "square_avg", "momentum_buffer?", "lr", "loss?"},
                      {"alpha:float", "eps:float", "momentum:float=0", "weight_decay:float=0"}, {0, 2, 3});
  d.infer = [](const Metas& in, const Attrs&) -> Metas {
    check_update(in, {4});
    return {};
  };
  return d;
}());

}  // namespace
}  // namespace kiln

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

// Multi-tensor forms: one call updates every parameter of a group, so a
// device runs one kernel for them all rather than one per parameter (a
// launch each, which on a GPU costs more than a small layer's update). The
// scalars come first, then `count` parameters, their gradients and each
// state in turn (the variadic list); the arithmetic is the single-tensor
// op's, element for element.
// Checks the variadic list from `first`: `lists` lists of `count` tensors,
// each tensor matching its parameter; the scalars and the loss before it as in check_update.
void check_many(const Metas& in, size_t first, size_t lists, const Attrs& a, std::initializer_list<size_t> scalars,
                size_t loss) {
  const int64_t count = a.get_int("count");
  KILN_CHECK(count >= 1, "count must be at least 1, got ", count);
  KILN_CHECK(in.size() == first + lists * static_cast<size_t>(count), "expected ", lists, " lists of ", count,
             " tensors after the scalars (", first + lists * count, " inputs), got ", in.size(), " inputs");
  for (size_t s : scalars)
    KILN_CHECK(in[s].shape.empty() && in[s].dtype == DType::Float64, "input ", s,
               " must be a 0-d float64 tensor (learning rate or step), got ", dtype_name(in[s].dtype),
               shape_str(in[s].shape));
  if (in[loss].defined)
    KILN_CHECK(in[loss].shape.empty() && is_floating(in[loss].dtype), "loss must be a floating 0-d tensor");
  for (int64_t i = 0; i < count; ++i) {
    const TensorMeta& p = in[first + i];
    detail::check_floating(p, "param");
    KILN_CHECK(p.dtype == in[first].dtype, "every parameter of one call must have one dtype: parameter ", i, " is ",
               dtype_name(p.dtype), ", parameter 0 ", dtype_name(in[first].dtype));
    for (size_t l = 1; l < lists; ++l) {
      const TensorMeta& t = in[first + l * count + i];
      KILN_CHECK(t.shape == p.shape && t.dtype == p.dtype, "list ", l, " tensor ", i, " must match its parameter (",
                 dtype_name(p.dtype), shape_str(p.shape), "), got ", dtype_name(t.dtype), shape_str(t.shape));
    }
  }
}

// The written inputs: every list from `first` but the gradients (the second).
std::function<std::vector<int>(const Attrs&, size_t)> writes_but_gradients(int first) {
  return [first](const Attrs& a, size_t inputs) {
    const int count = static_cast<int>(a.get_int("count"));
    std::vector<int> w;
    for (int i = first; i < static_cast<int>(inputs); ++i)
      if ((i - first) / count != 1) w.push_back(i);
    return w;
  };
}

OpDefiner d_sgd_many([] {
  OpDef d = update_op("sgd_update_many", {"lr", "loss?", "tensors*"},
                      {"count:int", "momentum:float=0", "nesterov:bool=false", "weight_decay:float=0"}, {});
  d.dispatch_input = 2;
  d.writes_of = writes_but_gradients(2);
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_many(in, 2, a.get_float("momentum", 0) != 0 ? 3 : 2, a, {0}, 1);
    return {};
  };
  return d;
}());

OpDefiner d_adam_many([] {
  OpDef d = update_op(
      "adam_update_many", {"lr", "step", "loss?", "tensors*"},
      {"count:int", "beta1:float", "beta2:float", "eps:float", "weight_decay:float=0", "decoupled:bool=false"}, {});
  d.dispatch_input = 3;
  d.writes_of = writes_but_gradients(3);
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_many(in, 3, 4, a, {0, 1}, 2);
    return {};
  };
  return d;
}());

OpDefiner d_rmsprop_many([] {
  OpDef d = update_op("rmsprop_update_many", {"lr", "loss?", "tensors*"},
                      {"count:int", "alpha:float", "eps:float", "momentum:float=0", "weight_decay:float=0"}, {});
  d.dispatch_input = 2;
  d.writes_of = writes_but_gradients(2);
  d.infer = [](const Metas& in, const Attrs& a) -> Metas {
    check_many(in, 2, a.get_float("momentum", 0) != 0 ? 4 : 3, a, {0}, 1);
    return {};
  };
  return d;
}());

}  // namespace
}  // namespace kiln

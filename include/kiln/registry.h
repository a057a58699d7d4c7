#pragma once
// The op registry: one definition per op (schema, shape/dtype inference,
// gradient rule, ONNX writer, tags) and kernels per (op, backend, dtype).
// Everything else (dispatch, autograd, `kiln ops`, the generic op tests) is
// driven from here.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/op_onnx.h"
#include "kiln/tensor.h"

namespace kiln {

// What shape inference sees of a tensor: metadata, never data.
struct TensorMeta {
  bool defined = true;  // false for an omitted optional input
  Shape shape;
  DType dtype = DType::Float32;
  Device device;
};

enum OpTag : uint32_t {
  // out[i] is a function of element i of each input (after broadcasting)
  // and the attributes alone, so the op computes the same on any memory order
  // of operands of the output's shape: graph mode's layout pass runs it on
  // channel-blocked data as is.
  kTagElementwise = 1u << 0,
  kTagReduction = 1u << 1,
  kTagView = 1u << 2,             // outputs alias the first input's storage
  kTagNondifferentiable = 1u << 3,
  kTagFusible = 1u << 4,
  kTagRandom = 1u << 5,           // draws from the default generator
  kTagBackward = 1u << 6,         // exists to compute another op's gradient
  kTagLoss = 1u << 7,
  // Outputs live on the device its `infer` names (to_device), not on the
  // dispatch input's.
  kTagTransfer = 1u << 8,
  // Talks to the other ranks of a process group: never folded, merged or
  // moved past another collective (tests/dist covers them).
  kTagCollective = 1u << 9,
};
std::string tags_str(uint32_t tags);

// The precision an op computes in under autocast (kiln/grad_mode.h).
enum class Autocast : uint8_t {
  FromTags,  // losses and reductions Float32, the rest Keep
  Keep,      // its inputs' dtypes
  Lower,     // float32 inputs in the autocast dtype: matrix products, convolutions
  Float32,   // float16/bfloat16 inputs in float32: softmax, normalizations, exp and log
};
const char* autocast_name(Autocast rule);

struct GradContext {
  const std::vector<Tensor>& inputs;   // as passed (undefined for omitted optionals)
  const std::vector<Tensor>& outputs;  // detached aliases of the outputs
  const Attrs& attrs;
  // Which inputs need a gradient; a rule may skip work for the others.
  const std::vector<bool>& needs_grad;
};

// Returns one gradient per input (undefined where there is none). Gradients of
// outputs that received none arrive as undefined tensors, except the first.
using GradFn = std::function<std::vector<Tensor>(const GradContext&, const std::vector<Tensor>& grads)>;
using InferFn = std::function<std::vector<TensorMeta>(const std::vector<TensorMeta>&, const Attrs&)>;
// Outputs are allocated by the dispatcher from `infer`, except for view ops,
// whose kernel sets them.
using KernelFn = void (*)(const std::vector<Tensor>& inputs, std::vector<Tensor>& outputs,
                          const Attrs& attrs);

// What a kernel is asked to run: its inputs' dtypes (an omitted optional
// input absent) and the call's attributes.
struct KernelCall {
  const std::vector<DType>& dtypes;
  const Attrs& attrs;
};
// Whether a kernel takes a call: one may cover only some of an op's calls
// (a library's algorithms, a loop written for one case). False, with the
// reason in *why, runs the call on the CPU instead, visibly, as for a
// missing kernel.
using KernelAccepts = bool (*)(const KernelCall& call, std::string* why);
// A registered kernel: the function, what it accepts (null: every call) and
// those calls it turns away in words, for the op table ("groups other than 1").
// It is registered for dtypes of the op's dispatch input; `input_dtypes`
// names, per input in order, the dtypes it takes there (empty: any), and a
// call with another goes to the CPU as a call it does not accept does.
struct Kernel {
  Kernel(KernelFn f = nullptr, KernelAccepts a = nullptr, const char* r = "") : fn(f), accepts(a), refuses(r) {}
  operator KernelFn() const { return fn; }  // NOLINT: a kernel is its function where one is wanted
  // This kernel, taking only these dtypes per input: Kernel(fn).takes({{}, {DType::Int64}}).
  Kernel takes(std::vector<std::vector<DType>> per_input) const {
    Kernel k = *this;
    k.input_dtypes = std::move(per_input);
    return k;
  }
  KernelFn fn;
  KernelAccepts accepts;
  const char* refuses;
  std::vector<std::vector<DType>> input_dtypes;
};

// An elementwise op's formula on contiguous runs: out[i] = f(in[0][i], ...)
// with the op's attributes, in float and in double. It is written once, in
// the op's definition; graph mode's elementwise fusion chains the float form,
// and `kernel` runs it on tensors of any layout (broadcasting, strides,
// float16/bfloat16 through float) with the block runner of the tensors'
// backend. The registry gives `kernel` to every backend with a runner for
// each dtype where the op has no kernel of its own.
template <typename T>
using BlockFn = void (*)(const T* const* in, T* out, int64_t n, const Attrs& attrs);
struct ElementwiseMath {
  int arity = 0;
  BlockFn<float> f32 = nullptr;
  BlockFn<double> f64 = nullptr;
  KernelFn kernel = nullptr;
  // The formula's functor by name (src/ops/elementwise_formulas.h), for a
  // device backend that compiles the same functor into kernels of its own.
  const char* formula = nullptr;
  explicit operator bool() const { return f32 != nullptr; }
};
// How a backend runs block math over tensors of any layout.
using BlockRunner = void (*)(const ElementwiseMath& math, const std::vector<Tensor>& inputs,
                             std::vector<Tensor>& outputs, const Attrs& attrs);

struct OpDef {
  std::string name;
  std::vector<std::string> inputs;   // "x", "bias?" (optional), "tensors*" (variadic)
  std::vector<std::string> outputs;
  std::vector<std::string> attrs;    // "name:type=default" ("axis:int=-1", "min:float?"); dispatch checks calls against it
  InferFn infer;
  GradFn grad;                       // empty: not differentiable
  OnnxExport onnx;                   // how it is written as ONNX; empty: export refuses it
  OnnxImport onnx_import;            // the ONNX op types read as this op; empty: none
  // The MindSpore primitives (of a MindIR model) read as this op: their
  // names in `types`, read through the same reader interface, whose
  // attributes are the primitive's (op_onnx.h).
  OnnxImport mindspore_import;
  uint32_t tags = 0;
  std::string category;              // the profiler's op type ("convolution", ...); empty: from the tags
  Autocast autocast = Autocast::FromTags;
  ElementwiseMath math;              // elementwise ops: the formula, for kernels and fusion
  int dispatch_input = 0;            // whose dtype picks the kernel
  std::vector<int> differentiable_inputs;  // empty: every floating input
  std::vector<int> writes;                 // inputs the kernel updates in place (optimizer updates, assign)
  std::string writes_if;                   // a bool attribute the writes depend on (batch_norm: "training")
  // A variadic op's written inputs, from its attributes and input count
  // (a multi-tensor update writes its parameters and their state, not the
  // gradients between them); taken in place of `writes` where set.
  std::function<std::vector<int>(const Attrs& attrs, size_t inputs)> writes_of;
  // The op as a program of other ops, which a device without a kernel for
  // the call runs in place of the CPU's kernel: its work stays on the
  // device, and autograd records the ops it calls (the op itself no node).
  // Empty: such a call falls back to the CPU.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const Attrs& attrs)> decompose;
  Kernel kernels[kNumDeviceTypes][kNumDTypes] = {};

  // The attribute schema parsed from `attrs` when the op is defined: a name
  // and a kind ("int", "ints", "float", "floats", "bool", "string", "dtype";
  // "" accepts any value).
  struct AttrSpec {
    std::string name, kind;
  };
  std::vector<AttrSpec> attr_specs;

  bool has_tag(OpTag t) const { return (tags & t) != 0; }
  Autocast autocast_rule() const {
    if (autocast != Autocast::FromTags) return autocast;
    return has_tag(kTagLoss) || has_tag(kTagReduction) ? Autocast::Float32 : Autocast::Keep;
  }
  bool differentiable() const { return static_cast<bool>(grad); }
  bool writes_with(const Attrs& a) const {
    return (!writes.empty() || writes_of) && (writes_if.empty() || a.get_bool(writes_if, true));
  }
  // The inputs a call with these attributes and `inputs` inputs may write in
  // place (whatever writes_if says), and those it does write.
  std::vector<int> may_write(const Attrs& a, size_t inputs) const { return writes_of ? writes_of(a, inputs) : writes; }
  std::vector<int> written(const Attrs& a, size_t inputs) const {
    return writes_with(a) ? may_write(a, inputs) : std::vector<int>{};
  }
  bool variadic() const { return !inputs.empty() && inputs.back().back() == '*'; }
  // Input i's name without its mark ("bias?" -> "bias"); past the list, the
  // last input's (a variadic op's) or "x".
  std::string input_name(size_t i) const {
    std::string n = i < inputs.size() ? inputs[i] : inputs.empty() ? "x" : inputs.back();
    while (!n.empty() && (n.back() == '?' || n.back() == '*')) n.pop_back();
    return n;
  }
  std::vector<DType> dtypes(DeviceType backend) const;
};

class OpRegistry {
 public:
  static OpRegistry& instance();
  OpDef& define(OpDef def);  // throws when the name is taken
  const OpDef* find(const std::string& name) const;
  const OpDef& get(const std::string& name) const;  // throws listing close names
  void register_kernel(const std::string& op, DeviceType backend, DType dtype, Kernel kernel);
  // A backend's runner of block math, for the given dtypes: every op with
  // `math` gets math.kernel there unless it registers a kernel of its own.
  void register_block_runner(DeviceType backend, BlockRunner runner, const std::vector<DType>& dtypes);
  BlockRunner block_runner(DeviceType backend) const;
  std::vector<const OpDef*> all() const;  // sorted by name

 private:
  void give_math_kernel(OpDef& op, DeviceType backend);
  std::map<std::string, std::unique_ptr<OpDef>> ops_;
  BlockRunner runners_[kNumDeviceTypes] = {};
  std::vector<DType> runner_dtypes_[kNumDeviceTypes];
};

// Static registration helpers: one object per definition or kernel.
struct OpDefiner {
  explicit OpDefiner(OpDef def) { OpRegistry::instance().define(std::move(def)); }
};
struct KernelRegistrar {
  KernelRegistrar(const char* op, DeviceType backend, std::initializer_list<DType> dtypes, Kernel kernel);
};
struct BlockRunnerRegistrar {
  BlockRunnerRegistrar(DeviceType backend, BlockRunner runner, std::initializer_list<DType> dtypes) {
    OpRegistry::instance().register_block_runner(backend, runner, dtypes);
  }
};

// Called before every op runs (for tests and profiling); nullptr disables.
using DispatchObserver = void (*)(const OpDef& op, const std::vector<Tensor>& inputs);
void set_dispatch_observer(DispatchObserver observer);

// An op with no kernel on its tensors' backend runs on the CPU: the inputs
// are copied there, the outputs back, a warning is printed the first time
// for each op and backend, and profiles mark the call as a fallback. Under
// strict_device that is an error naming the op and the backend instead.
// Starts from the environment: KILN_STRICT_DEVICE=1.
void set_strict_device(bool strict);
bool strict_device();
// Calls that ran on the CPU in place of their backend so far, in this process.
int64_t fallback_count();

// Runs an op: infers outputs, picks the kernel, records autograd.
std::vector<Tensor> call(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
std::vector<Tensor> call(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});
// Convenience for single-output ops.
Tensor call1(const OpDef& op, const std::vector<Tensor>& inputs, const Attrs& attrs = {});

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// KILN_REGISTER_KERNEL("add", CPU, add_kernel, DType::Float32, DType::Float64)
#define KILN_REGISTER_KERNEL(OP, BACKEND, FN, ...)                       \
  static ::kiln::KernelRegistrar KILN_CONCAT(kiln_kernel_, __COUNTER__)( \
      OP, ::kiln::DeviceType::BACKEND, {__VA_ARGS__}, ::kiln::Kernel(FN))
// A kernel that takes only the calls ACCEPTS (a KernelAccepts) lets
// through; REFUSES says which it turns away ("groups other than 1").
#define KILN_REGISTER_KERNEL_IF(OP, BACKEND, FN, ACCEPTS, REFUSES, ...)  \
  static ::kiln::KernelRegistrar KILN_CONCAT(kiln_kernel_, __COUNTER__)( \
      OP, ::kiln::DeviceType::BACKEND, {__VA_ARGS__}, ::kiln::Kernel(FN, ACCEPTS, REFUSES))

#include "runtime/onnx_ops.h"

#include <set>

#include "kiln/registry.h"

namespace kiln::runtime {

OnnxNode::OnnxNode(const ::onnx::NodeProto& proto, int opset) : proto_(proto), opset_(opset) {}

std::string OnnxNode::where() const {
  std::string s = "node ";
  if (!proto_.name().empty()) s += "'" + proto_.name() + "' ";
  s += "(" + proto_.op_type() + ", opset " + std::to_string(opset_) + ")";
  return s;
}

const ::onnx::AttributeProto* OnnxNode::attr(const std::string& name) const {
  for (const auto& a : proto_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

void OnnxNode::fail_with(const std::string& message) const { throw Error(where() + ": " + message); }
void OnnxNode::unsupported_with(const std::string& message) const { throw Unsupported(where() + ": " + message); }

bool OnnxNode::has(const std::string& name) const { return attr(name) != nullptr; }

int64_t OnnxNode::i(const std::string& name, int64_t fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::INT && a->type() != ::onnx::AttributeProto::UNDEFINED)
    fail("attribute '", name, "' should be an int");
  return a->i();
}

int64_t OnnxNode::required_i(const std::string& name) const {
  if (!has(name)) fail("the required attribute '", name, "' is missing");
  return i(name, 0);
}

double OnnxNode::f(const std::string& name, double fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::FLOAT && a->type() != ::onnx::AttributeProto::UNDEFINED)
    fail("attribute '", name, "' should be a float");
  return a->f();
}

std::string OnnxNode::s(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::vector<int64_t> OnnxNode::ints(const std::string& name, const std::vector<int64_t>& fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  return {a->ints().begin(), a->ints().end()};
}

std::vector<double> OnnxNode::floats(const std::string& name) const {
  const auto* a = attr(name);
  if (!a) return {};
  return {a->floats().begin(), a->floats().end()};
}

std::vector<std::string> OnnxNode::strings(const std::string& name) const {
  const auto* a = attr(name);
  if (!a) return {};
  return {a->strings().begin(), a->strings().end()};
}

const ::onnx::TensorProto* OnnxNode::tensor(const std::string& name) const {
  const auto* a = attr(name);
  return a && a->has_t() ? &a->t() : nullptr;
}

std::vector<int64_t> int_values(const OnnxNode& n, const Tensor& t, const char* what) {
  if (!t.defined()) n.fail("the ", what, " input is missing");
  if (is_floating(t.dtype())) n.fail("the ", what, " input should hold integers, not ", dtype_name(t.dtype()));
  return t.to(DType::Int64).contiguous().to_vector<int64_t>();
}

double scalar_value(const OnnxNode& n, const Tensor& t, const char* what) {
  if (!t.defined()) n.fail("the ", what, " input is missing");
  if (t.numel() != 1) n.fail("the ", what, " input should hold one value, it has shape ", shape_str(t.shape()));
  return t.to(DType::Float64).contiguous().to_vector<double>()[0];
}

void check_created_size(const OnnxNode& n, const Shape& shape) {
  constexpr int64_t kMax = int64_t{1} << 28;  // 1 GiB of float32
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) n.fail("shape ", shape_str(shape), " has a negative size");
    if (d > 0 && numel > kMax / d) n.fail("the result ", shape_str(shape), " would hold more than 2^28 elements");
    numel *= d;
  }
}

Tensor scalar_like(double value, const Tensor& x) { return scalar_tensor(value, x.dtype()); }

const std::vector<int>& value_inputs(const std::string& op_type) {
  static const std::map<std::string, std::vector<int>> table = [] {
    std::map<std::string, std::vector<int>> t = {
        {"Reshape", {1}}, {"Expand", {1}},    {"Tile", {1}},          {"Clip", {1, 2}},       {"CumSum", {1}},
        {"Slice", {1, 2, 3, 4}}, {"Split", {1}}, {"Squeeze", {1}},   {"Unsqueeze", {1}},     {"Pad", {1, 2, 3}},
        {"Trilu", {1}},   {"Range", {0, 1, 2}}, {"ConstantOfShape", {0}}, {"Dropout", {1, 2}}, {"OneHot", {1}},
    };
    for (const char* r : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceLogSumExp",
                          "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum"})
      t[r] = {1};
    for (const OpDef* op : OpRegistry::instance().all())
      for (const std::string& type : op->onnx_import.types)
        if (!op->onnx_import.value_inputs.empty()) t[type] = op->onnx_import.value_inputs;
    return t;
  }();
  static const std::vector<int> none;
  auto it = table.find(op_type);
  return it == table.end() ? none : it->second;
}

namespace {

bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }

// float16 and bfloat16 inputs are computed in float32 and the results
// rounded once at the end, as ONNX's reference does: most Kiln kernels have
// no half-precision form, and composite ops would round at every step.
Converter in_float32(Converter f) {
  return [f](const OnnxNode& n, const std::vector<Tensor>& in) -> std::vector<Tensor> {
    DType half = DType::Float32;
    for (const Tensor& t : in)
      if (t.defined() && is_half(t.dtype())) half = t.dtype();
    if (half == DType::Float32) return f(n, in);
    std::vector<Tensor> wide;
    for (const Tensor& t : in) wide.push_back(t.defined() && is_half(t.dtype()) ? t.to(DType::Float32) : t);
    std::vector<Tensor> out = f(n, wide);
    for (Tensor& t : out)
      if (t.defined() && t.dtype() == DType::Float32) t = t.to(half);
    return out;
  };
}

}  // namespace

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_elementwise_converters(t);
    add_nn_converters(t);
    add_shape_converters(t);
    add_reduce_converters(t);
    // Ops that move or reinterpret data keep their dtype.
    std::set<std::string> exact = {
        "Cast", "CastLike", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat",
        "Split", "Slice", "Gather", "GatherElements", "Expand", "Tile", "Shape", "Size", "Constant",
        "ConstantOfShape", "Range", "Pad", "Trilu", "DepthToSpace", "SpaceToDepth", "Dropout"};
    for (const OpDef* op : OpRegistry::instance().all()) {
      for (const std::string& type : op->onnx_import.types) {
        KILN_CHECK(!t.count(type), "ONNX op type ", type, " is read by op '", op->name,
                   "' and by another converter; one type has one reader");
        t[type] = [read = op->onnx_import.read](const OnnxNode& n, const std::vector<Tensor>& in) { return read(n, in); };
        if (!op->onnx_import.widen_half) exact.insert(type);
      }
    }
    for (auto& [op, fn] : t)
      if (!exact.count(op)) fn = in_float32(fn);
    return t;
  }();
  return table;
}

}  // namespace kiln::runtime

#include "runtime/onnx_ops.h"

#include <algorithm>
#include <mutex>
#include <set>

#include "kiln/registry.h"

namespace kiln::runtime {

OnnxNode::OnnxNode(const ::onnx::NodeProto& proto, int opset) : proto_(proto), opset_(opset) {}

std::string OnnxNode::where() const {
  std::string s = "node ";
  if (!proto_.name().empty()) s += "'" + proto_.name() + "' ";
  // (A custom domain's own opset is not tracked: the default domain's would mislead.)
  const std::string& domain = proto_.domain();
  if (domain.empty() || domain == "ai.onnx")
    s += "(" + proto_.op_type() + ", opset " + std::to_string(opset_) + ")";
  else
    s += "(" + domain + "::" + proto_.op_type() + ")";
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

DType OnnxNode::dtype(const std::string& name) const {
  return onnx_io::kiln_dtype(static_cast<int>(required_i(name)), where() + " attribute '" + name + "'");
}

const ::onnx::TensorProto* OnnxNode::tensor(const std::string& name) const {
  const auto* a = attr(name);
  return a && a->has_t() ? &a->t() : nullptr;
}

Tensor scalar_like(double value, const Tensor& x) { return scalar_tensor(value, x.dtype()); }

const std::vector<int>& value_inputs(const std::string& op_type) {
  static const std::map<std::string, std::vector<int>> table = [] {
    std::map<std::string, std::vector<int>> t = {{"Tile", {1}}, {"Range", {0, 1, 2}}, {"ConstantOfShape", {0}},
                                                 {"If", {0}},   {"Loop", {0, 1}},     {"GroupQueryAttention", {6}}};
    for (const char* r : {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum"}) t[r] = {1};
    for (const OpDef* op : OpRegistry::instance().all())
      for (const std::string& type : op->onnx_import.types)
        if (!op->onnx_import.value_inputs.empty()) t[type] = op->onnx_import.value_inputs;
    return t;
  }();
  static const std::vector<int> none;
  auto it = table.find(op_type);
  return it == table.end() ? none : it->second;
}

std::vector<Tensor> computed_in_float32(const std::vector<Tensor>& in,
                                        const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& compute) {
  auto is_half = [](DType d) { return d == DType::Float16 || d == DType::BFloat16; };
  DType half = DType::Float32;
  for (const Tensor& t : in)
    if (t.defined() && is_half(t.dtype())) half = t.dtype();
  if (half == DType::Float32) return compute(in);
  std::vector<Tensor> wide;
  for (const Tensor& t : in) wide.push_back(t.defined() && is_half(t.dtype()) ? t.to(DType::Float32) : t);
  std::vector<Tensor> out = compute(wide);
  for (Tensor& t : out)
    if (t.defined() && t.dtype() == DType::Float32) t = t.to(half);
  return out;
}

namespace {

Converter in_float32(Converter f) {
  return [f](const OnnxNode& n, const std::vector<Tensor>& in) {
    return computed_in_float32(in, [&](const std::vector<Tensor>& args) { return f(n, args); });
  };
}

}  // namespace

const ConverterTable& converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    add_elementwise_converters(t);
    add_shape_converters(t);
    add_reduce_converters(t);
    add_norm_converters(t);
    add_quant_converters(t);
    add_attention_converters(t);
    add_contrib_converters(t);
    // Ops that move or reinterpret data keep their dtype.
    std::set<std::string> exact = {"Identity", "Tile",  "Shape", "Size", "Constant", "ConstantOfShape",
                                   "Range",    "DepthToSpace", "SpaceToDepth", "GatherND", "QuantizeLinear",
                                   "DequantizeLinear", "DynamicQuantizeLinear", "EyeLike",
                                   "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
                                   "com.microsoft::QGemm", "com.microsoft::QLinearAdd"};
    for (const OpDef* op : OpRegistry::instance().all()) {
      for (const std::string& type : op->onnx_import.types) {
        if (type.find("::") != std::string::npos) continue;  // a custom domain's (find_converter)
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

const Converter* find_converter(const std::string& domain, const std::string& op_type) {
  if (domain.empty()) {
    auto it = converters().find(op_type);
    return it == converters().end() ? nullptr : &it->second;
  }
  // Packages load at any time, so custom domains are looked up when a model
  // uses them; entries are never removed, so their addresses stay valid.
  static std::mutex mutex;
  static std::map<std::string, Converter> custom;
  const std::string qualified = domain + "::" + op_type;
  if (auto own = converters().find(qualified); own != converters().end()) return &own->second;  // the runtime's own
  std::lock_guard<std::mutex> lock(mutex);
  auto it = custom.find(qualified);
  if (it != custom.end()) return &it->second;
  for (const OpDef* op : OpRegistry::instance().all()) {
    const auto& types = op->onnx_import.types;
    if (std::find(types.begin(), types.end(), qualified) == types.end()) continue;
    Converter c = [read = op->onnx_import.read](const OnnxNode& n, const std::vector<Tensor>& in) {
      return read(n, in);
    };
    return &(custom[qualified] = op->onnx_import.widen_half ? in_float32(c) : c);
  }
  return nullptr;
}

}  // namespace kiln::runtime

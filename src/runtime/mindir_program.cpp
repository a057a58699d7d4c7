#include "runtime/mindir_program.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "kiln/functional.h"
#include "kiln/op_onnx.h"
#include "kiln/registry.h"
#include "mind_ir.pb.h"
#include "runtime/onnx_ops.h"

namespace kiln {
namespace runtime {
namespace {

using Attribute = ::mind_ir::AttributeProto;

// What a name of the graph holds while it runs: nothing (a monad, None), a
// tensor, or a tuple of values.
struct Value {
  enum Kind { Nothing, One, Tuple } kind = Nothing;
  Tensor tensor;
  std::vector<Value> items;
  static Value of(Tensor t) {
    Value v;
    v.kind = One;
    v.tensor = std::move(t);
    return v;
  }
  static Value tuple(std::vector<Value> items) {
    Value v;
    v.kind = Tuple;
    v.items = std::move(items);
    return v;
  }
  // The tensors it holds, depth first (a tuple handed to a primitive, such
  // as Concat's, arrives as its items).
  void flatten_into(std::vector<Tensor>& out) const {
    if (kind == One) out.push_back(tensor);
    for (const Value& v : items) v.flatten_into(out);
  }
};

bool is_int_type(int type) {
  return (type >= Attribute::UINT8 && type <= Attribute::INT64) || type == Attribute::UINT32 ||
         type == Attribute::UINT64;
}

DType dtype_of(int data_type, const std::string& where) {
  using T = ::mind_ir::TensorProto;
  switch (data_type) {
    case T::FLOAT: return DType::Float32;
    case T::DOUBLE:
    case T::FLOAT64: return DType::Float64;
    case T::FLOAT16: return DType::Float16;
    case T::BFLOAT16: return DType::BFloat16;
    case T::INT32: return DType::Int32;
    case T::INT64: return DType::Int64;
    case T::INT8: return DType::Int8;
    case T::UINT8: return DType::UInt8;
    case T::BOOL: return DType::Bool;
    default: break;
  }
  const std::string name = T::DataType_IsValid(data_type) ? T::DataType_Name(static_cast<T::DataType>(data_type))
                                                          : std::to_string(data_type);
  throw UnsupportedError(where + " is of type " + name + ", which Kiln has no dtype for");
}

template <typename Field>
Tensor from_field(const Field& values, DType stored, DType dtype, const Shape& shape) {
  std::vector<double> v(values.begin(), values.end());
  return from_vector(v, shape).to(stored).to(dtype);
}

Tensor tensor_of(const ::mind_ir::TensorProto& t, const std::string& where) {
  if (t.has_external_data())
    throw UnsupportedError(where + " keeps its data in another file (" + t.external_data().location() +
                           ", MindSpore's form for models over 2 GB); export a smaller model, or one file");
  if (t.compression_type() != ::mind_ir::TensorProto::NO_COMPRESSION)
    throw UnsupportedError(where + " is compressed (" + ::mind_ir::TensorProto::CompressionType_Name(t.compression_type()) +
                           "); export it without weight compression");
  const DType dtype = dtype_of(t.data_type(), where);
  Shape shape(t.dims().begin(), t.dims().end());
  int64_t numel = 1;
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0 && d < (int64_t{1} << 40), where, " has a bad dimension ", d);
    numel *= d;
    KILN_CHECK(numel < (int64_t{1} << 40), where, " is absurdly large");
  }
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);
  if (t.has_raw_data()) {
    KILN_CHECK(t.raw_data().size() == bytes, where, " ", dtype_name(dtype), shape_str(shape), " should hold ", bytes,
               " bytes of data, holds ", t.raw_data().size(), " (a truncated file?)");
    Tensor out = Tensor::empty(shape, dtype);
    if (bytes) std::memcpy(out.raw_data(), t.raw_data().data(), bytes);
    return out;
  }
  auto check = [&](int size) {
    KILN_CHECK(size == numel, where, " ", shape_str(shape), " holds ", size, " values instead of ", numel);
  };
  if (t.float_data_size()) return check(t.float_data_size()), from_field(t.float_data(), DType::Float32, dtype, shape);
  if (t.double_data_size()) return check(t.double_data_size()), from_field(t.double_data(), DType::Float64, dtype, shape);
  if (t.int64_data_size()) return check(t.int64_data_size()), from_field(t.int64_data(), DType::Int64, dtype, shape);
  if (t.int32_data_size()) return check(t.int32_data_size()), from_field(t.int32_data(), DType::Int64, dtype, shape);
  KILN_CHECK(numel == 0, where, " ", shape_str(shape), " has no data");
  return Tensor::empty(shape, dtype);
}

int64_t int_of(const Attribute& a) { return a.ints_size() ? a.ints(0) : a.i(); }
double float_of(const Attribute& a) {
  if (a.type() == Attribute::DOUBLE) return a.doubles_size() ? a.doubles(0) : a.d();
  return a.floats_size() ? a.floats(0) : a.f();
}

// A constant: a tensor, a tuple (of ints it is a 1-D int64 tensor: a shape,
// a permutation, axes), a scalar (0-d), a type (an empty tensor of that
// dtype, which Cast reads), or nothing (monads, None, strings).
Value constant_of(const Attribute& a, const std::string& where) {
  const int type = a.type();
  if (type == Attribute::TENSORS || type == Attribute::TENSOR) {
    if (type == Attribute::TENSOR) return Value::of(tensor_of(a.t(), where));
    if (a.tensors_size() == 0) return Value();
    const auto& t = a.tensors(0);
    if (!t.has_raw_data() && t.dims_size() == 0 && t.float_data_size() == 0 && t.int64_data_size() == 0 &&
        t.int32_data_size() == 0 && t.double_data_size() == 0)
      return Value::of(Tensor::empty({0}, dtype_of(t.data_type(), where)));
    return Value::of(tensor_of(t, where));
  }
  if (type == Attribute::TUPLE || type == Attribute::LIST) {
    std::vector<Value> items;
    bool all_ints = true;
    for (const auto& v : a.values()) {
      items.push_back(constant_of(v, where));
      all_ints = all_ints && is_int_type(v.type());
    }
    if (!all_ints) return Value::tuple(std::move(items));
    std::vector<int64_t> ints;
    for (const auto& v : a.values()) ints.push_back(int_of(v));
    return Value::of(from_vector(ints, Shape{static_cast<int64_t>(ints.size())}));
  }
  if (is_int_type(type)) return Value::of(scalar_tensor(static_cast<double>(int_of(a)), DType::Int64));
  if (type == Attribute::BOOL) return Value::of(scalar_tensor(int_of(a) != 0, DType::Bool));
  if (type == Attribute::FLOAT) return Value::of(scalar_tensor(float_of(a), DType::Float32));
  if (type == Attribute::DOUBLE) return Value::of(scalar_tensor(float_of(a), DType::Float64));
  if (type == Attribute::UMONAD || type == Attribute::IOMONAD || type == Attribute::NONE || type == Attribute::STRING)
    return Value();
  throw UnsupportedError(where + " holds a constant of kind " +
                         (Attribute::AttributeType_IsValid(type) ? Attribute::AttributeType_Name(static_cast<Attribute::AttributeType>(type))
                                                                 : std::to_string(type)));
}

// One node as a primitive's reader sees it: the primitive's attributes.
class PrimitiveNode : public OnnxReader {
 public:
  PrimitiveNode(std::string type, std::string name, std::vector<const Attribute*> attrs, size_t outputs)
      : type_(std::move(type)), name_(std::move(name)), attrs_(std::move(attrs)), outputs_(outputs) {}
  const std::string& op_type() const override { return type_; }
  int opset() const override { return 0; }
  size_t num_outputs() const override { return outputs_; }
  bool output_wanted(size_t i) const override { return i < outputs_; }
  std::string where() const override { return "node '" + name_ + "' (" + type_ + ")"; }
  bool has(const std::string& name) const override { return attr(name) != nullptr; }
  int64_t i(const std::string& name, int64_t fallback) const override {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (!is_int_type(a->type()) && a->type() != Attribute::BOOL) fail("attribute '", name, "' should be an int");
    return int_of(*a);
  }
  double f(const std::string& name, double fallback) const override {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (is_int_type(a->type())) return static_cast<double>(int_of(*a));
    if (a->type() != Attribute::FLOAT && a->type() != Attribute::DOUBLE) fail("attribute '", name, "' should be a float");
    return float_of(*a);
  }
  std::string s(const std::string& name, const std::string& fallback) const override {
    const Attribute* a = attr(name);
    if (!a || a->type() != Attribute::STRING) return fallback;
    return a->strings_size() ? a->strings(0) : a->s();
  }
  std::vector<int64_t> ints(const std::string& name, const std::vector<int64_t>& fallback) const override {
    const Attribute* a = attr(name);
    if (!a) return fallback;
    if (is_int_type(a->type())) return {int_of(*a)};
    if (a->type() != Attribute::TUPLE && a->type() != Attribute::LIST) fail("attribute '", name, "' should be ints");
    std::vector<int64_t> out;
    append_ints(*a, name, out);
    return out;
  }
  std::vector<double> floats(const std::string& name) const override {
    const Attribute* a = attr(name);
    if (!a) return {};
    if (a->type() != Attribute::TUPLE && a->type() != Attribute::LIST) return {f(name, 0)};
    std::vector<double> out;
    for (const auto& v : a->values()) out.push_back(is_int_type(v.type()) ? static_cast<double>(int_of(v)) : float_of(v));
    return out;
  }
  std::vector<std::string> strings(const std::string& name) const override {
    const Attribute* a = attr(name);
    if (!a) return {};
    std::vector<std::string> out;
    for (const auto& v : a->values()) out.push_back(v.s());
    return out;
  }
  DType dtype(const std::string& name) const override {
    const Attribute* a = attr(name);
    if (!a || a->tensors_size() == 0) fail("attribute '", name, "' should be a type");
    return dtype_of(a->tensors(0).data_type(), where() + " attribute '" + name + "'");
  }
  [[noreturn]] void fail_with(const std::string& message) const override { throw Error(where() + ": " + message); }
  [[noreturn]] void unsupported_with(const std::string& message) const override {
    throw UnsupportedError(where() + ": " + message);
  }

 private:
  // The ints of a tuple, nested tuples (Pad's paddings) flattened in order.
  void append_ints(const Attribute& a, const std::string& name, std::vector<int64_t>& out) const {
    for (const auto& v : a.values()) {
      if (v.type() == Attribute::TUPLE || v.type() == Attribute::LIST) append_ints(v, name, out);
      else if (is_int_type(v.type())) out.push_back(int_of(v));
      else fail("attribute '", name, "' should hold ints only");
    }
  }
  const Attribute* attr(const std::string& name) const {
    for (const Attribute* a : attrs_)
      if (a->name() == name) return a;
    return nullptr;
  }
  std::string type_, name_;
  std::vector<const Attribute*> attrs_;
  size_t outputs_;
};

// The readers of MindSpore primitives, by name, from every op's definition.
const std::map<std::string, const OnnxImport*>& primitive_readers() {
  static const std::map<std::string, const OnnxImport*> table = [] {
    std::map<std::string, const OnnxImport*> t;
    for (const OpDef* op : OpRegistry::instance().all())
      for (const std::string& type : op->mindspore_import.types) {
        KILN_CHECK(!t.count(type), "MindSpore primitive ", type, " is read by op '", op->name,
                   "' and by another op; one primitive has one reader");
        t[type] = &op->mindspore_import;
      }
    return t;
  }();
  return table;
}

// A primitive's reader on its inputs, half floats computed in float32
// unless the reader only moves data (OnnxImport::widen_half).
std::vector<Tensor> read_widened(const OnnxImport& reader, const OnnxReader& node, const std::vector<Tensor>& in) {
  if (!reader.widen_half) return reader.read(node, in);
  return computed_in_float32(in, [&](const std::vector<Tensor>& args) { return reader.read(node, args); });
}

// The graph's names without the graph's own prefix ("net_1:x" -> "x").
std::string short_name(const std::string& name) {
  auto colon = name.rfind(':');
  return colon == std::string::npos ? name : name.substr(colon + 1);
}

TensorInfo info_of(const std::string& name, const ::mind_ir::TensorProto* t, const std::string& where) {
  TensorInfo info;
  info.name = name;
  if (!t) {
    info.shape_known = false;
    return info;
  }
  info.dtype = dtype_of(t->data_type(), where);
  for (int64_t d : t->dims()) {
    info.shape.push_back(d >= 0 ? d : -1);
    info.dim_names.push_back(d >= 0 ? "" : "?");
  }
  return info;
}

size_t tuple_size(const ::mind_ir::NodeProto& node) {
  for (const auto& a : node.attribute())
    if (a.name() == "shape" && (a.type() == Attribute::TUPLE || a.type() == Attribute::LIST)) return a.values_size();
  return 1;
}

// What a node does: applies a primitive's reader, or only routes values.
enum class StepKind { Apply, MakeTuple, GetItem, Pass, Nothing };

// The primitives that only route values, and what each does.
const std::map<std::string, StepKind>& bookkeeping_primitives() {
  using K = StepKind;
  static const std::map<std::string, StepKind> table = {
      {"MakeTuple", K::MakeTuple}, {"make_tuple", K::MakeTuple},   {"MakeList", K::MakeTuple},
      {"make_list", K::MakeTuple}, {"TupleGetItem", K::GetItem},   {"tuple_getitem", K::GetItem},
      {"ListGetItem", K::GetItem}, {"list_getitem", K::GetItem},   {"Depend", K::Pass},
      {"Load", K::Pass},           {"Return", K::Pass},            {"UpdateState", K::Nothing}};
  return table;
}

}  // namespace

struct MindirProgram::Graph {
  struct Step {
    StepKind kind;
    std::unique_ptr<PrimitiveNode> node;
    const OnnxImport* reader = nullptr;
    std::vector<int> inputs;
    int output = -1;
  };
  ::mind_ir::ModelProto model;
  std::vector<Value> constants;  // per slot: parameters and constants
  std::vector<int> input_slots;
  int output_slot = -1;
  std::vector<Step> steps;
};

MindirProgram::~MindirProgram() = default;

MindirProgram::MindirProgram(const std::string& bytes, const std::string& what) : graph_(std::make_unique<Graph>()) {
  auto& model = graph_->model;
  KILN_CHECK(!bytes.empty(), what, ": the file is empty");
  KILN_CHECK(model.ParseFromString(bytes), what,
             ": not a valid MindIR model (the protobuf does not parse: a truncated file, an encrypted export ",
             "(export(..., enc_key=...)) or another format)");
  KILN_CHECK(model.has_graph(), what, ": a MindIR file without a graph");
  producer_ = model.producer_name() + (model.model_version().empty() ? "" : " " + model.model_version());
  metadata_["mindir.ir_version"] = model.ir_version();
  KILN_CHECK(model.little_endian() || !model.has_little_endian(), what,
             ": the model was exported on a big-endian machine; Kiln reads little-endian data");
  const auto& g = model.graph();

  std::unordered_map<std::string, int> slot;
  auto define = [&](const std::string& name, const std::string& by) {
    KILN_CHECK(!name.empty(), what, ": ", by, " has no name");
    KILN_CHECK(!slot.count(name), what, ": '", name, "' is defined twice (", by, ")");
    slot[name] = static_cast<int>(graph_->constants.size());
    graph_->constants.emplace_back();
    return slot[name];
  };
  std::map<std::string, const ::mind_ir::PrimitiveProto*> primitives;
  for (const auto& p : model.primitives()) primitives[p.name()] = &p;
  std::set<std::string> functions;
  for (const auto& f : model.functions()) functions.insert(f.name());

  for (const auto& in : g.input()) {
    const int s = define(in.name(), "an input");
    graph_->input_slots.push_back(s);
    inputs_.push_back(info_of(short_name(in.name()), in.tensor_size() ? &in.tensor(0) : nullptr,
                              what + ": input '" + in.name() + "'"));
    KILN_CHECK(inputs_.back().shape_known, what, ": input '", in.name(), "' is not a tensor (",
               in.has_attr_info() ? Attribute::AttributeType_Name(in.attr_info().type()) : "no type", ")");
  }
  for (const auto& p : g.parameter())
    graph_->constants[define(p.name(), "a parameter")] = Value::of(tensor_of(p, what + ": parameter '" + p.name() + "'"));

  // Every primitive Kiln lacks, at once.
  std::map<std::string, std::vector<std::string>> missing;
  for (const auto& node : g.node()) {
    const std::string name = node.output_size() ? node.output(0) : node.name();
    const std::string label = short_name(node.name().empty() ? name : node.name());
    if (node.op_type() == "Constant") {
      const int s = define(name, "constant '" + label + "'");
      for (const auto& a : node.attribute())
        if (a.name() == "value") graph_->constants[s] = constant_of(a, what + ": constant '" + label + "'");
      continue;
    }
    // "REF::Conv2D:3" names a primitive of the model; older files name the
    // primitive itself and put its attributes on the node.
    std::string type = node.op_type();
    std::vector<const Attribute*> attrs;
    if (type.rfind("REF::", 0) == 0) {
      const std::string ref = type.substr(5);
      auto p = primitives.find(ref);
      if (p == primitives.end()) {
        const std::string kind = functions.count(ref) ? "a call of function graph '" + ref + "'"
                                                      : "a reference to '" + ref + "' (not a primitive of the model)";
        missing[kind].push_back(label);
        define(name, label);
        continue;
      }
      type = p->second->op_type();
      for (const auto& a : p->second->attribute()) attrs.push_back(&a);
    } else {
      for (const auto& a : node.attribute())
        if (a.name() != "shape") attrs.push_back(&a);
    }
    Graph::Step step;
    auto book = bookkeeping_primitives().find(type);
    if (book != bookkeeping_primitives().end()) {
      step.kind = book->second;
    } else {
      step.kind = StepKind::Apply;
      auto r = primitive_readers().find(type);
      if (r == primitive_readers().end()) {
        missing[type].push_back(label);
      } else {
        step.reader = r->second;
      }
    }
    step.node = std::make_unique<PrimitiveNode>(type, label, std::move(attrs), tuple_size(node));
    for (const auto& in : node.input()) {
      auto it = slot.find(in);
      if (it == slot.end() && functions.count(in))  // a branch or a loop body handed to a primitive
        missing["a function graph as a value (control flow: Switch, Partial, while loops)"].push_back(label);
      KILN_CHECK(it != slot.end() || !missing.empty(), what, ": node '", label, "' reads '", in,
                 "', which nothing before it defines");
      step.inputs.push_back(it == slot.end() ? -1 : it->second);
    }
    step.output = define(name, "node '" + label + "'");
    graph_->steps.push_back(std::move(step));
  }
  if (!missing.empty()) {
    std::string list;
    std::vector<std::string> types;
    for (const auto& [type, nodes] : missing) {
      types.push_back(type);
      list += "\n  " + type + ": " + std::to_string(nodes.size()) + " node(s): ";
      for (size_t i = 0; i < nodes.size() && i < 5; ++i) list += (i ? ", " : "") + nodes[i];
      if (nodes.size() > 5) list += ", ...";
    }
    throw UnsupportedError(detail::concat(what, ": ", missing.size(), " MindSpore primitive(s) are not supported by Kiln:",
                                          list, "\n`kiln ops --mindspore` lists the supported ones"),
                           types);
  }
  KILN_CHECK(g.output_size() == 1, what, ": the graph has ", g.output_size(), " outputs; MindIR graphs return one value");
  auto out = slot.find(g.output(0).name());
  KILN_CHECK(out != slot.end(), what, ": the graph returns '", g.output(0).name(), "', which nothing defines");
  graph_->output_slot = out->second;
  const auto& o = g.output(0);
  if (o.tensor_size()) {
    for (int i = 0; i < o.tensor_size(); ++i)
      outputs_.push_back(info_of(o.tensor_size() == 1 ? "output" : "output_" + std::to_string(i), &o.tensor(i), what + ": output"));
  } else if (o.has_attr_info() && o.attr_info().type() == Attribute::TUPLE) {
    for (int i = 0; i < o.attr_info().values_size(); ++i) {
      const auto& v = o.attr_info().values(i);
      outputs_.push_back(info_of("output_" + std::to_string(i), v.tensors_size() ? &v.tensors(0) : nullptr, what + ": output"));
    }
  } else {
    outputs_.push_back(info_of("output", nullptr, what));
  }
  bound_by_value_.assign(inputs_.size(), false);
}

std::vector<Tensor> MindirProgram::run(const std::vector<Tensor>& inputs) const {
  std::vector<Value> values = graph_->constants;
  for (size_t i = 0; i < inputs.size(); ++i) values[graph_->input_slots[i]] = Value::of(inputs[i]);
  for (const auto& step : graph_->steps) {
    const PrimitiveNode& node = *step.node;
    Value& out = values[step.output];
    switch (step.kind) {
      case StepKind::Pass:
        if (step.inputs.empty()) node.fail("takes at least one input");
        out = values[step.inputs[0]];
        break;
      case StepKind::Nothing:
        out = Value();
        break;
      case StepKind::MakeTuple: {
        std::vector<Value> items;
        for (int s : step.inputs) items.push_back(values[s]);
        out = Value::tuple(std::move(items));
        break;
      }
      case StepKind::GetItem: {
        if (step.inputs.size() != 2) node.fail("takes a tuple and an index");
        const Value& tuple = values[step.inputs[0]];
        const Value& index = values[step.inputs[1]];
        if (index.kind != Value::One) node.fail("the index is not a constant");
        const auto i = static_cast<int64_t>(node.scalar_value(index.tensor, "index"));
        if (tuple.kind == Value::One && i == 0) {  // a primitive that returned only what is read
          out = tuple;
          break;
        }
        if (tuple.kind != Value::Tuple || i < 0 || i >= static_cast<int64_t>(tuple.items.size()))
          node.fail("index ", i, " is out of range for a tuple of ", tuple.items.size());
        out = tuple.items[i];
        break;
      }
      case StepKind::Apply: {
        std::vector<Tensor> args;
        for (int s : step.inputs) values[s].flatten_into(args);
        std::vector<Tensor> results = read_widened(*step.reader, node, args);
        if (results.size() == 1 && node.num_outputs() == 1) {
          out = Value::of(results[0]);
        } else {
          std::vector<Value> items;
          for (Tensor& t : results) items.push_back(Value::of(t));
          out = Value::tuple(std::move(items));
        }
        break;
      }
    }
  }
  std::vector<Tensor> outputs;
  values[graph_->output_slot].flatten_into(outputs);
  return outputs;
}

}  // namespace runtime

std::vector<std::pair<std::string, std::string>> supported_mindspore_primitives() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const OpDef* op : OpRegistry::instance().all())
    for (const std::string& type : op->mindspore_import.types) out.emplace_back(type, op->name);
  for (const auto& [type, kind] : runtime::bookkeeping_primitives()) out.emplace_back(type, "");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kiln

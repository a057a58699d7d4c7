// Post-training quantization: find the layers, calibrate their activations
// on the float model, write the QDQ model, and compare it with the float one.
#include "kiln/quantize.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "io/onnx_tensor.h"
#include "kiln/functional.h"
#include "kiln/runtime.h"
#include "runtime/onnx_ops.h"
#include "runtime/quantize_observers.h"

namespace kiln {
namespace {

using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

// A layer to quantize: its input activation, the activation after it (its
// output, or its ReLU's), its constant weights and bias.
struct Layer {
  std::string name, op, input, output, weight, bias;
  int64_t axis = 0;  // the weights' output-channel axis
  int node = 0;
};

struct Params {
  float scale = 1;
  int zero = 0;
};

class Graph {
 public:
  explicit Graph(const GraphProto& g) : g_(g) {
    for (const auto& t : g.initializer()) init_[t.name()] = &t;
    for (const auto& in : g.input()) inputs_[in.name()] = &in;
    for (const auto& out : g.output()) outputs_.insert(out.name());
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& o : g.node(i).output()) producer_[o] = i;
      for (const auto& in : g.node(i).input()) consumers_[in].push_back(i);
    }
  }
  // A float32 initializer named `name`, or reached from it through Identity
  // nodes (torch.onnx.export shares equal constants that way).
  const TensorProto* float_initializer(const std::string& name) const {
    std::string at = name;
    for (int hops = 0; hops < 8; ++hops) {
      auto it = init_.find(at);
      if (it != init_.end())
        return inputs_.count(at) || it->second->data_type() != TensorProto::FLOAT ? nullptr : it->second;
      const int p = producer(at);
      if (p < 0 || g_.node(p).op_type() != "Identity" || g_.node(p).input_size() != 1) return nullptr;
      at = g_.node(p).input(0);
    }
    return nullptr;
  }
  bool is_float_activation(const std::string& name) const {
    if (init_.count(name)) return false;
    if (auto it = inputs_.find(name); it != inputs_.end())
      return it->second->type().tensor_type().elem_type() == TensorProto::FLOAT;
    return producer_.count(name) > 0;
  }
  const std::vector<int>& consumers(const std::string& name) const {
    static const std::vector<int> none;
    auto it = consumers_.find(name);
    return it == consumers_.end() ? none : it->second;
  }
  bool is_output(const std::string& name) const { return outputs_.count(name) > 0; }
  bool is_input(const std::string& name) const { return inputs_.count(name) > 0; }
  int producer(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() ? -1 : it->second;
  }

 private:
  const GraphProto& g_;
  std::map<std::string, const TensorProto*> init_;
  std::map<std::string, const ::onnx::ValueInfoProto*> inputs_;
  std::set<std::string> outputs_;
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
};

std::vector<Layer> find_layers(const GraphProto& g, const std::set<std::string>& keep) {
  const Graph view(g);
  std::vector<Layer> layers;
  for (int i = 0; i < g.node_size(); ++i) {
    const NodeProto& n = g.node(i);
    if (!n.domain().empty() && n.domain() != "ai.onnx") continue;
    if (keep.count(n.name()) || (n.output_size() > 0 && keep.count(n.output(0)))) continue;
    Layer l{n.name().empty() ? n.output(0) : n.name(), n.op_type(), n.input_size() > 0 ? n.input(0) : "", n.output(0),
            n.input_size() > 1 ? n.input(1) : "", n.input_size() > 2 ? n.input(2) : "", 0, i};
    const TensorProto* w = view.float_initializer(l.weight);
    if (!w || !view.is_float_activation(l.input)) continue;
    if (n.op_type() == "Conv") {
      if (w->dims_size() != 3 && w->dims_size() != 4) continue;
      l.axis = 0;
    } else if (n.op_type() == "MatMul") {
      if (w->dims_size() != 2) continue;
      l.axis = 1;
    } else if (n.op_type() == "Gemm") {
      const runtime::OnnxNode attrs(n, 0);
      if (w->dims_size() != 2 || attrs.i("transA", 0) != 0 || attrs.f("alpha", 1) != 1 || attrs.f("beta", 1) != 1)
        continue;
      l.axis = attrs.i("transB", 0) ? 0 : 1;
    } else {
      continue;
    }
    const int64_t channels = w->dims(static_cast<int>(l.axis));
    if (!l.bias.empty()) {
      const TensorProto* b = view.float_initializer(l.bias);
      if (!b || b->dims_size() != 1 || b->dims(0) != channels) continue;
    }
    // A ReLU (or a clip, ReLU6) that alone reads the output joins the layer:
    // its range is the quantized output's, whose saturation then does its work.
    const auto& readers = view.consumers(l.output);
    if (readers.size() == 1 && !view.is_output(l.output) &&
        (g.node(readers[0]).op_type() == "Relu" || g.node(readers[0]).op_type() == "Clip"))
      l.output = g.node(readers[0]).output(0);
    layers.push_back(l);
  }
  return layers;
}

// The activations to observe or quantize, in a fixed order.
// Besides the layers' inputs and outputs, the float inputs of each pool
// and concatenation whose result is quantized (a layer reads it, through a
// Flatten after a pool), so that the runtime runs those on int8 values too
// (QLinearAveragePool, QLinearGlobalAveragePool, QLinearConcat).
std::vector<std::string> activations_of(const GraphProto& g, const std::vector<Layer>& layers) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const Layer& l : layers)
    for (const std::string& t : {l.input, l.output})
      if (seen.insert(t).second) names.push_back(t);
  const Graph view(g);
  for (bool grew = true; grew;) {  // until a chain of them (a concatenation before a pool) is all in
    grew = false;
    for (const NodeProto& n : g.node()) {
      const bool pool = n.op_type() == "GlobalAveragePool" || n.op_type() == "AveragePool";
      if ((!n.domain().empty() && n.domain() != "ai.onnx") || (!pool && n.op_type() != "Concat") || n.output_size() != 1)
        continue;
      std::string result = n.output(0);
      const auto& readers = view.consumers(result);
      if (pool && readers.size() == 1 && g.node(readers[0]).op_type() == "Flatten") result = g.node(readers[0]).output(0);
      if (!seen.count(result)) continue;  // its result stays float
      for (const std::string& in : n.input())
        if (view.is_float_activation(in) && seen.insert(in).second) names.push_back(in), grew = true;
    }
  }
  return names;
}

// The model with `names` as extra graph outputs (after its own).
std::string with_outputs(const ModelProto& model, const std::vector<std::string>& names) {
  ModelProto m = model;
  std::set<std::string> have;
  for (const auto& o : m.graph().output()) have.insert(o.name());
  for (const std::string& name : names) {
    if (have.count(name)) continue;
    auto* o = m.mutable_graph()->add_output();
    o->set_name(name);
    o->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  }
  return m.SerializeAsString();
}

// The outputs of `session` by name, for one batch.
std::map<std::string, Tensor> run_named(InferenceSession& session, const std::vector<Tensor>& batch) {
  const std::vector<Tensor> out = session.run(batch);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < out.size(); ++i) named[session.outputs()[i].name] = out[i];
  return named;
}

Params activation_params(std::pair<double, double> range, DType type) {
  // The range always holds zero, so that zero (padding, ReLU) is exact.
  const double lo = std::min(range.first, 0.0), hi = std::max(range.second, 0.0);
  Params p;
  p.scale = hi > lo ? static_cast<float>((hi - lo) / 255.0) : 1.0f;
  const double qmin = type == DType::Int8 ? -128 : 0;
  p.zero = static_cast<int>(std::clamp(std::nearbyint(qmin - lo / p.scale), qmin, qmin + 255));
  return p;
}

class QdqWriter {
 public:
  QdqWriter(const ModelProto& model, const QuantizeOptions& o) : m_(model), o_(o) {}

  std::string write(const std::vector<Layer>& layers, const std::map<std::string, Params>& params) {
    GraphProto& g = *m_.mutable_graph();
    const Graph view(g);
    std::vector<NodeProto> before;                   // weight and input dequantizers, first
    std::map<int, std::vector<NodeProto>> after;     // an activation's pair after its producer
    std::map<std::string, std::string> renamed_inputs;  // graph input -> its dequantized value
    for (const auto& [t, p] : params) {
      const std::string scale = add(t + "_scale", from_vector<float>({p.scale}, {}));
      const std::string zero = add(t + "_zero_point", o_.activations == DType::Int8
                                                          ? from_vector<int8_t>({static_cast<int8_t>(p.zero)}, {})
                                                          : from_vector<uint8_t>({static_cast<uint8_t>(p.zero)}, {}));
      const int at = view.producer(t);
      const std::string source = at >= 0 ? t + "_float" : t, target = at >= 0 ? t : t + "_dequantized";
      std::vector<NodeProto> pair = {node("QuantizeLinear", {source, scale, zero}, t + "_quantized"),
                                     node("DequantizeLinear", {t + "_quantized", scale, zero}, target)};
      if (at >= 0) {
        for (auto& o : *g.mutable_node(at)->mutable_output())
          if (o == t) o = source;
        for (auto& n : pair) after[at].push_back(n);
      } else {
        renamed_inputs[t] = target;
        for (auto& n : pair) before.push_back(n);
      }
    }
    std::map<std::string, std::string> dequantized_weights;  // a weight -> its DequantizeLinear's output
    for (const Layer& l : layers) {
      NodeProto& n = *g.mutable_node(l.node);
      if (!renamed_inputs.empty())
        for (auto& in : *n.mutable_input())
          if (renamed_inputs.count(in)) in = renamed_inputs[in];
      const Tensor w = onnx_io::from_proto(*view.float_initializer(l.weight), l.weight);
      const Tensor w_scale = weight_scales(w, l.axis);
      if (!dequantized_weights.count(l.weight)) {
        const std::string q = add(l.weight + "_quantized", quantized_weights(w, w_scale, l.axis));
        const std::string s = add(l.weight + "_scale", w_scale);
        const std::string z = add(l.weight + "_zero_point", zeros({w_scale.numel()}, DType::Int8));
        dequantized_weights[l.weight] = unique_value(l.weight + "_dequantized");
        before.push_back(node("DequantizeLinear", {q, s, z}, dequantized_weights[l.weight], l.axis));
      }
      n.set_input(1, dequantized_weights[l.weight]);
      if (!l.bias.empty()) {
        const Tensor b = onnx_io::from_proto(*view.float_initializer(l.bias), l.bias);
        const Tensor b_scale = w_scale * from_vector<float>({params.at(l.input).scale}, {});
        const Tensor b_q = cast(clamp(round(cast(b, DType::Float64) / cast(b_scale, DType::Float64)), -2147483647.0,
                                      2147483647.0),
                                DType::Int32);
        const std::string base = l.bias + "_" + l.name;
        const std::string q = add(base + "_quantized", b_q), s = add(base + "_scale", b_scale),
                          z = add(base + "_zero_point", zeros({b_scale.numel()}, DType::Int32));
        const std::string dq = unique_value(base + "_dequantized");
        before.push_back(node("DequantizeLinear", {q, s, z}, dq, 0));
        n.set_input(2, dq);
      }
    }
    // The graph with the dequantizers first and each activation's pair after its producer.
    google::protobuf::RepeatedPtrField<NodeProto> nodes;
    for (auto& n : before) *nodes.Add() = n;
    for (int i = 0; i < g.node_size(); ++i) {
      *nodes.Add() = g.node(i);
      for (auto& n : after[i]) *nodes.Add() = n;
    }
    g.mutable_node()->Swap(&nodes);
    drop_unused(g);
    return m_.SerializeAsString();
  }

 private:
  // The float weights the quantized ones replaced: Identity nodes and
  // initializers nothing reads any more (names read in subgraphs count).
  static void drop_unused(GraphProto& g) {
    std::set<std::string> read;
    std::function<void(const GraphProto&)> visit = [&](const GraphProto& sub) {
      for (const auto& n : sub.node()) {
        for (const auto& in : n.input()) read.insert(in);
        for (const auto& a : n.attribute()) {
          if (a.has_g()) visit(a.g());
          for (const auto& gg : a.graphs()) visit(gg);
        }
      }
      for (const auto& o : sub.output()) read.insert(o.name());
    };
    for (bool changed = true; changed;) {
      read.clear();
      visit(g);
      google::protobuf::RepeatedPtrField<NodeProto> nodes;
      for (auto& n : *g.mutable_node())
        if (n.op_type() != "Identity" || n.output_size() != 1 || read.count(n.output(0))) *nodes.Add() = n;
      changed = nodes.size() != g.node_size();
      g.mutable_node()->Swap(&nodes);
    }
    google::protobuf::RepeatedPtrField<TensorProto> kept;
    std::set<std::string> dropped;
    for (auto& t : *g.mutable_initializer()) {
      if (read.count(t.name())) *kept.Add() = t;
      else dropped.insert(t.name());
    }
    g.mutable_initializer()->Swap(&kept);
    google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> inputs;  // initializers listed as inputs (IR < 4)
    for (auto& in : *g.mutable_input())
      if (!dropped.count(in.name())) *inputs.Add() = in;
    g.mutable_input()->Swap(&inputs);
  }
  std::string unique_value(const std::string& base) {
    std::string name = base;
    for (int i = 1; names_taken(name); ++i) name = base + "_" + std::to_string(i);
    added_.insert(name);
    return name;
  }

  // Symmetric, per output channel: the largest magnitude maps to 127 (63).
  Tensor weight_scales(const Tensor& w, int64_t axis) const {
    std::vector<int64_t> others;
    for (int64_t d = 0; d < w.dim(); ++d)
      if (d != axis) others.push_back(d);
    const double qmax = o_.reduce_range ? 63.0 : 127.0;
    const Tensor peak = amax(abs(w), others, false);
    return cast(where(gt(peak, scalar_tensor(0.0)), peak / qmax, ones_like(peak)), DType::Float32);
  }
  Tensor quantized_weights(const Tensor& w, const Tensor& scale, int64_t axis) const {
    Shape s(static_cast<size_t>(w.dim()), 1);
    s[static_cast<size_t>(axis)] = scale.numel();
    const double qmax = o_.reduce_range ? 63.0 : 127.0;
    return cast(clamp(round(w / scale.reshape(s)), -qmax, qmax), DType::Int8);
  }

  std::string add(const std::string& base, const Tensor& t) {
    std::string name = base;
    for (int i = 1; names_taken(name); ++i) name = base + "_" + std::to_string(i);
    TensorProto* p = m_.mutable_graph()->add_initializer();
    onnx_io::to_proto(t, *p);
    p->set_name(name);
    added_.insert(name);
    return name;
  }
  bool names_taken(const std::string& name) const {
    if (added_.count(name)) return true;
    const GraphProto& g = m_.graph();
    for (const auto& t : g.initializer())
      if (t.name() == name) return true;
    for (const auto& n : g.node())
      for (const auto& o : n.output())
        if (o == name) return true;
    for (const auto& in : g.input())
      if (in.name() == name) return true;
    return false;
  }
  static NodeProto node(const char* type, const std::vector<std::string>& in, const std::string& out,
                        int64_t axis = -1) {
    NodeProto n;
    n.set_op_type(type);
    n.set_name(out + (type[0] == 'Q' ? "_QuantizeLinear" : "_DequantizeLinear"));
    for (const auto& i : in) n.add_input(i);
    n.add_output(out);
    if (axis >= 0) {
      auto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(::onnx::AttributeProto::INT);
      a->set_i(axis);
    }
    return n;
  }

  ModelProto m_;
  const QuantizeOptions& o_;
  std::set<std::string> added_;
};

// |a - b| summed over batches, per name, for the report.
struct Difference {
  double err2 = 0, ref2 = 0, max_abs = 0;
  int64_t rows = 0, agree = 0;
  void add(const Tensor& q, const Tensor& f, bool rows_of_classes) {
    const Tensor qd = cast(q, DType::Float64), fd = cast(f, DType::Float64), d = qd - fd;
    err2 += sum(d * d).item<double>();
    ref2 += sum(fd * fd).item<double>();
    max_abs = std::max(max_abs, amax(abs(d), {}, false).item<double>());
    if (!rows_of_classes) return;
    const auto a = argmax(qd, 1).to_vector<int64_t>(), b = argmax(fd, 1).to_vector<int64_t>();
    rows += static_cast<int64_t>(a.size());
    for (size_t i = 0; i < a.size(); ++i) agree += a[i] == b[i];
  }
  double relative() const { return ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2); }
};

}  // namespace

void QuantizeResult::save(const std::string& path) const { io::write_file_atomic(path, {{model.data(), model.size()}}); }

int QuantizeReport::quantized() const {
  return static_cast<int>(std::count_if(layers.begin(), layers.end(), [](const QuantizedLayer& l) { return !l.kept_float; }));
}

std::string QuantizeReport::str() const {
  std::ostringstream s;
  if (weights_only) {
    s << quantized() << " of " << layers.size() << " layers' weights quantized (" << method << ")\n"
      << "  layers most changed (relative error of their weights):\n";
    for (size_t i = 0; i < layers.size() && i < 5; ++i)
      s << "    " << layers[i].name << " (" << layers[i].op << "): " << layers[i].relative_error
        << (layers[i].kept_float ? ", kept in float32" : "") << "\n";
    return s.str();
  }
  s << quantized() << " of " << layers.size() << " layers quantized (" << method << " calibration on "
    << calibration_batches << " batch(es), compared on " << held_out_batches << " held-out)\n";
  if (learned_input_ranges > 0)
    s << "  " << learned_input_ranges << " layers keep the input ranges learned in quantization-aware training\n";
  for (const QuantizedOutput& o : outputs) {
    s << "  output " << o.name << ": relative error " << o.relative_error << ", largest " << o.max_abs_error;
    if (o.top1_agreement >= 0) s << ", top-1 agreement " << 100.0 * o.top1_agreement << "%";
    s << "\n";
  }
  s << "  layers most changed (relative error of their outputs):\n";
  for (size_t i = 0; i < layers.size() && i < 5; ++i)
    s << "    " << layers[i].name << " (" << layers[i].op << "): " << layers[i].relative_error
      << (layers[i].kept_float ? ", kept in float32" : "") << "\n";
  return s.str();
}

QuantizeResult quantize_model(const std::string& model_bytes, const std::vector<std::vector<Tensor>>& calibration,
                              const QuantizeOptions& o) {
  ModelProto model;
  KILN_CHECK(model.ParseFromString(model_bytes) && model.has_graph(), "quantize: not an ONNX model");
  int opset = 0;
  for (const auto& i : model.opset_import())
    if (i.domain().empty() || i.domain() == "ai.onnx") opset = static_cast<int>(i.version());
  KILN_CHECK(opset >= 13, "quantize: the model has opset ", opset,
             "; per-channel quantization needs opset 13 or newer (export with opset_version=13 or later)");
  KILN_CHECK(!calibration.empty(), "quantize: no calibration batches; give a few batches of typical inputs");
  KILN_CHECK(o.method == "minmax" || o.method == "percentile" || o.method == "entropy", "quantize: unknown method '",
             o.method, "': minmax, percentile or entropy");
  KILN_CHECK(o.held_out >= 0 && o.held_out < 1, "quantize: held_out is a share of the batches in [0, 1), got ", o.held_out);
  KILN_CHECK(o.activations == DType::UInt8 || o.activations == DType::Int8,
             "quantize: activations are uint8 or int8, not ", dtype_name(o.activations));
  std::set<std::string> keep(o.keep_float.begin(), o.keep_float.end());
  std::vector<Layer> layers = find_layers(model.graph(), {});
  for (const std::string& k : keep) {
    if (std::any_of(layers.begin(), layers.end(),
                    [&](const Layer& l) { return l.name == k || model.graph().node(l.node).output(0) == k; }))
      continue;
    std::string names;
    for (size_t i = 0; i < layers.size() && i < 8; ++i) names += (i ? ", " : "") + layers[i].name;
    KILN_FAIL("quantize: --keep '", k, "' names no quantizable layer (Conv, MatMul or Gemm with constant weights); ",
              "they are: ", names, layers.size() > 8 ? ", ..." : "");
  }
  KILN_CHECK(!layers.empty(), "quantize: the model has no Conv, MatMul or Gemm with constant float weights to quantize");

  // Calibrate every layer's activations once on the float model.
  const size_t held = calibration.size() > 1
                          ? std::clamp<size_t>(static_cast<size_t>(std::ceil(o.held_out * calibration.size())), 1,
                                               calibration.size() - 1)
                          : 0;
  const std::vector<std::vector<Tensor>> calibrate(calibration.begin(), calibration.end() - static_cast<long>(held));
  const std::vector<std::vector<Tensor>> compare =
      held ? std::vector<std::vector<Tensor>>(calibration.end() - static_cast<long>(held), calibration.end()) : calibrate;
  const std::vector<std::string> all = activations_of(model.graph(), layers);
  InferenceSession float_session = InferenceSession::from_bytes(with_outputs(model, all), {}, "the float model");
  std::map<std::string, runtime::RangeObserver> observers;
  for (const auto& batch : calibrate)
    for (auto& [name, t] : run_named(float_session, batch))
      if (std::count(all.begin(), all.end(), name)) observers[name].observe_extremes(t);
  if (o.method != "minmax")
    for (const auto& batch : calibrate)
      for (auto& [name, t] : run_named(float_session, batch))
        if (observers.count(name)) observers[name].observe_histogram(t);

  int learned = 0;  // layers of the last model built that keep a learned input range
  auto build = [&](const std::set<std::string>& kept) {
    const std::vector<Layer> chosen = find_layers(model.graph(), kept);
    std::map<std::string, Params> params;
    const std::vector<std::string> activations = activations_of(model.graph(), chosen);
    std::map<std::string, std::pair<double, double>> given;  // by tensor: the ranges learned in training
    for (const Layer& l : chosen)
      if (auto r = o.input_ranges.find(l.weight); r != o.input_ranges.end()) given[l.input] = r->second;
    learned = static_cast<int>(given.size());
    for (const std::string& t : activations) {
      if (auto r = given.find(t); r != given.end()) {
        params[t] = activation_params(r->second, o.activations);
        continue;
      }
      KILN_CHECK(observers[t].seen(), "quantize: activation '", t, "' held no finite value in calibration");
      params[t] = activation_params(observers[t].range(o.method, o.percentile), o.activations);
    }
    // A max pool's output keeps its input's parameters, so that it pools the quantized values as they are.
    const Graph view(model.graph());
    for (const std::string& t : activations) {
      const int p = view.producer(t);
      if (p < 0) continue;
      const NodeProto& n = model.graph().node(p);
      if (n.op_type() == "MaxPool" && n.input_size() > 0 && params.count(n.input(0))) params[t] = params[n.input(0)];
    }
    return QdqWriter(model, o).write(chosen, params);
  };
  QuantizeResult result;
  result.report.method = o.method;
  result.report.calibration_batches = static_cast<int64_t>(calibrate.size());
  result.report.held_out_batches = static_cast<int64_t>(held);
  auto compare_models = [&](const std::string& quantized) {
    std::vector<std::string> watched;
    for (const Layer& l : layers) watched.push_back(l.output);
    ModelProto qm;
    qm.ParseFromString(quantized);
    InferenceSession q = InferenceSession::from_bytes(with_outputs(qm, watched), {}, "the quantized model");
    std::map<std::string, Difference> diff;
    for (const auto& batch : compare) {
      std::map<std::string, Tensor> fo = run_named(float_session, batch), qo = run_named(q, batch);
      for (auto& [name, t] : qo) {
        if (!fo.count(name) || !is_floating(t.dtype())) continue;
        diff[name].add(t, fo[name], t.dim() == 2 && t.shape()[1] > 1);
      }
    }
    std::vector<QuantizedLayer> rows;
    for (const Layer& l : layers)
      rows.push_back({l.name, l.op, diff[l.output].relative(), keep.count(l.name) > 0});
    std::stable_sort(rows.begin(), rows.end(),
                     [](const QuantizedLayer& a, const QuantizedLayer& b) { return a.relative_error > b.relative_error; });
    std::vector<QuantizedOutput> outs;
    for (const auto& out : model.graph().output()) {
      const Difference& d = diff[out.name()];
      outs.push_back({out.name(), d.relative(), d.max_abs, d.rows ? static_cast<double>(d.agree) / d.rows : -1.0});
    }
    result.report.layers = rows;
    result.report.outputs = outs;
  };
  for (const Layer& l : layers)
    if (keep.count(model.graph().node(l.node).output(0))) keep.insert(l.name);
  result.model = build(keep);
  compare_models(result.model);
  if (o.keep_sensitive > 0) {
    int added = 0;
    for (const QuantizedLayer& l : result.report.layers)
      if (!keep.count(l.name) && added < o.keep_sensitive) keep.insert(l.name), ++added;
    const std::vector<QuantizedLayer> first = result.report.layers;
    result.model = build(keep);
    compare_models(result.model);
    // The errors the kept layers had when quantized, which is why they were kept.
    for (QuantizedLayer& l : result.report.layers)
      for (const QuantizedLayer& f : first)
        if (f.name == l.name && keep.count(l.name)) l.relative_error = f.relative_error, l.kept_float = true;
  }
  result.report.learned_input_ranges = learned;
  return result;
}

}  // namespace kiln

// Weight-only quantization (kiln/quantize.h: quantize_weights): each MatMul
// with constant float weights [K, N] rewritten into com.microsoft's
// MatMulNBits, its weights rounded to `bits` bits in blocks along K and
// packed as ONNX Runtime's MatMulNBitsQuantizer packs them: codes [N,
// blocks, block_size * bits / 8] low bits first, scales [N * blocks], zero
// points [N * ceil(blocks * bits / 8)] packed the same way; and, on request,
// each Gather of a constant table's rows [V, H] into GatherBlockQuantized,
// each row packed as a column of MatMulNBits' weights is: codes [V, H * bits
// / 8], scales [V, blocks], zero points [V, ceil(blocks * bits / 8)].
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "io/onnx_export.h"
#include "io/onnx_tensor.h"
#include "kiln/attrs.h"
#include "kiln/error.h"
#include "kiln/quantize.h"
#include "kiln/tensor.h"

namespace kiln {
namespace {

using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;

struct Packed {
  std::vector<uint8_t> codes, zeros;  // zeros empty when symmetric
  std::vector<float> scales;
  double relative_error = 0;
};

// w [K, N] row-major, each column's blocks rounded to nearest.
Packed pack(const std::vector<float>& w, int64_t k, int64_t n, const WeightQuantizeOptions& o) {
  const int64_t bits = o.bits, block = o.block_size, blocks = (k + block - 1) / block, per = 8 / bits;
  const int64_t blob = block / per, top = (1 << bits) - 1, zero_bytes = (blocks + per - 1) / per;
  Packed p;
  p.codes.assign(static_cast<size_t>(n * blocks * blob), 0);
  p.scales.assign(static_cast<size_t>(n * blocks), 0.0f);
  if (!o.symmetric) p.zeros.assign(static_cast<size_t>(n * zero_bytes), 0);
  double error = 0, norm = 0;
  for (int64_t col = 0; col < n; ++col)
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t first = j * block, last = std::min(k, first + block);
      float lo = 0.0f, hi = 0.0f;  // (the range holds zero: zero stays exact)
      for (int64_t i = first; i < last; ++i) lo = std::min(lo, w[i * n + col]), hi = std::max(hi, w[i * n + col]);
      float scale;
      int32_t zero;
      if (o.symmetric) {
        const int32_t half = 1 << (bits - 1);
        scale = std::max(-lo, hi) / static_cast<float>(half - 1);
        zero = half;
      } else {
        scale = (hi - lo) / static_cast<float>(top);
        zero = scale > 0 ? static_cast<int32_t>(std::clamp(std::nearbyint(-lo / scale), 0.0f, static_cast<float>(top)))
                         : 0;
      }
      const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      p.scales[static_cast<size_t>(col * blocks + j)] = scale;
      if (!o.symmetric)
        p.zeros[static_cast<size_t>(col * zero_bytes + j / per)] |= static_cast<uint8_t>(zero << ((j % per) * bits));
      for (int64_t i = first; i < first + block; ++i) {
        // (positions past K hold the zero point: they stand for 0)
        const float v = i < last ? w[i * n + col] : 0.0f;
        const int32_t q =
            std::clamp(static_cast<int32_t>(std::nearbyint(v * inverse)) + zero, 0, static_cast<int32_t>(top));
        const int64_t at = (col * blocks + j) * blob + (i - first) / per;
        p.codes[static_cast<size_t>(at)] |= static_cast<uint8_t>(q << (((i - first) % per) * bits));
        if (i < last) {
          const double d = static_cast<double>(q - zero) * scale - v;
          error += d * d;
          norm += static_cast<double>(v) * v;
        }
      }
    }
  p.relative_error = norm > 0 ? std::sqrt(error / norm) : 0.0;
  return p;
}

// An initializer named `name` holding t.
void add_initializer(::onnx::GraphProto& g, const std::string& name, const Tensor& t) {
  TensorProto* p = g.add_initializer();
  onnx_io::to_proto(t, *p);
  p->set_name(name);
}

}  // namespace

QuantizeResult quantize_weights(const std::string& model_bytes, const WeightQuantizeOptions& o) {
  KILN_CHECK(o.bits == 2 || o.bits == 4 || o.bits == 8, "quantize_weights: bits must be 2, 4 or 8, got ", o.bits);
  KILN_CHECK(o.block_size >= 16 && (o.block_size & (o.block_size - 1)) == 0,
             "quantize_weights: block_size must be a power of two of at least 16, got ", o.block_size);
  KILN_CHECK(o.accuracy_level == 0 || o.accuracy_level == 4,
             "quantize_weights: accuracy_level is 0 (float32 products) or 4 (int8 products), got ", o.accuracy_level);
  ModelProto model;
  KILN_CHECK(model.ParseFromString(model_bytes) && model.has_graph(), "quantize_weights: not an ONNX model");
  auto* graph = model.mutable_graph();
  std::map<std::string, int> initializer;  // name -> index
  for (int i = 0; i < graph->initializer_size(); ++i) initializer[graph->initializer(i).name()] = i;
  const std::set<std::string> keep(o.keep_float.begin(), o.keep_float.end());
  QuantizeResult result;
  result.report.weights_only = true;
  result.report.method = std::to_string(o.bits) + "-bit weights in blocks of " + std::to_string(o.block_size) +
                         (o.symmetric ? ", symmetric" : ", with zero points") +
                         (o.accuracy_level == 4 ? ", int8 products" : "");
  // The constant float weights a node of a type it rewrites reads (MatMul's
  // [K, N]; with embeddings, a Gather's table [V, H] on axis 0).
  auto constant_float = [&](const std::string& name, const TensorProto** weight) {
    const auto found = initializer.find(name);
    if (found == initializer.end()) return false;
    *weight = &graph->initializer(found->second);
    return (*weight)->data_type() == TensorProto::FLOAT && (*weight)->dims_size() == 2;
  };
  auto rewritten = [&](const NodeProto& n, const TensorProto** weight) {
    if (!n.domain().empty() || n.input_size() != 2) return false;
    if (n.op_type() == "MatMul") return constant_float(n.input(1), weight);
    if (n.op_type() != "Gather" || !o.embeddings) return false;
    for (const auto& a : n.attribute())
      if (a.name() == "axis" && a.i() != 0) return false;
    return constant_float(n.input(0), weight) && (*weight)->dims(1) % o.block_size == 0;
  };
  std::map<std::string, double> done;  // packed weights (shared by several nodes) by their new name, and their errors
  std::set<std::string> replaced;      // float weights a rewritten node read
  std::set<std::string> still_read;    // weights a node that stays float reads
  for (const NodeProto& n : graph->node()) {
    const TensorProto* weight = nullptr;
    if (!rewritten(n, &weight))
      for (const std::string& in : n.input()) still_read.insert(in);
  }
  for (NodeProto& n : *graph->mutable_node()) {
    const TensorProto* table = nullptr;
    if (n.op_type() == "Gather" && rewritten(n, &table)) {
      const std::string name = n.name().empty() ? n.output(0) : n.name();
      QuantizedLayer layer{name, "Gather", 0, keep.count(n.name()) || keep.count(n.output(0))};
      const std::string w = n.input(0), stem = w + "_" + std::to_string(o.bits) + "bit_rows";
      if (layer.kept_float) {
        still_read.insert(w);
        result.report.layers.push_back(layer);
        continue;
      }
      const int64_t rows = table->dims(0), width = table->dims(1), blocks = width / o.block_size;
      if (!done.count(stem)) {
        // Each row is packed as a column of MatMulNBits' weights: the table transposed.
        const std::vector<float> values =
            onnx_io::from_proto(*table, "quantize_weights").t().contiguous().to_vector<float>();
        const Packed p = pack(values, width, rows, o);
        add_initializer(*graph, stem, from_vector<uint8_t>(p.codes, {rows, width * o.bits / 8}));
        add_initializer(*graph, stem + "_scales", from_vector<float>(p.scales, {rows, blocks}));
        if (!o.symmetric)
          add_initializer(*graph, stem + "_zero_points",
                          from_vector<uint8_t>(p.zeros, {rows, static_cast<int64_t>(p.zeros.size()) / rows}));
        done[stem] = p.relative_error;
      }
      replaced.insert(w);
      layer.relative_error = done[stem];
      const std::string indices = n.input(1);
      n.clear_input();
      for (const std::string& in : {stem, indices, stem + "_scales"}) n.add_input(in);
      if (!o.symmetric) n.add_input(stem + "_zero_points");
      n.set_op_type("GatherBlockQuantized");
      n.set_domain("com.microsoft");
      n.clear_attribute();
      onnx_io::set_attrs(n, Attrs{{"bits", o.bits},
                                  {"block_size", o.block_size},
                                  {"gather_axis", int64_t{0}},
                                  {"quantize_axis", int64_t{1}}});
      result.report.layers.push_back(layer);
      continue;
    }
    if (n.op_type() != "MatMul" || !rewritten(n, &table)) continue;
    const TensorProto& weight = *table;
    const std::string name = n.name().empty() ? n.output(0) : n.name();
    QuantizedLayer layer{name, "MatMul", 0, keep.count(n.name()) || keep.count(n.output(0))};
    if (layer.kept_float) {
      still_read.insert(n.input(1));
    } else {
      const int64_t k = weight.dims(0), cols = weight.dims(1);
      const std::string w = n.input(1), stem = w + "_" + std::to_string(o.bits) + "bit";
      if (!done.count(stem)) {
        const Packed p =
            pack(onnx_io::from_proto(weight, "quantize_weights").contiguous().to_vector<float>(), k, cols, o);
        const int64_t blocks = (k + o.block_size - 1) / o.block_size;
        add_initializer(*graph, stem, from_vector<uint8_t>(p.codes, {cols, blocks, o.block_size * o.bits / 8}));
        add_initializer(*graph, stem + "_scales",
                        from_vector<float>(p.scales, {static_cast<int64_t>(p.scales.size())}));
        if (!o.symmetric)
          add_initializer(*graph, stem + "_zero_points",
                          from_vector<uint8_t>(p.zeros, {static_cast<int64_t>(p.zeros.size())}));
        done[stem] = p.relative_error;
      }
      replaced.insert(w);
      layer.relative_error = done[stem];
      const std::string a = n.input(0);
      n.clear_input();
      n.add_input(a);
      n.add_input(stem);
      n.add_input(stem + "_scales");
      if (!o.symmetric) n.add_input(stem + "_zero_points");
      n.set_op_type("MatMulNBits");
      n.set_domain("com.microsoft");
      n.clear_attribute();
      Attrs attrs{{"K", k}, {"N", cols}, {"bits", o.bits}, {"block_size", o.block_size}};
      if (o.accuracy_level) attrs.set("accuracy_level", o.accuracy_level);
      onnx_io::set_attrs(n, attrs);
    }
    result.report.layers.push_back(layer);
  }
  KILN_CHECK(!result.report.layers.empty(),
             "quantize_weights: the model has no MatMul with constant float32 weights [K, N]",
             o.embeddings ? " (nor Gather of a constant float32 table [V, H], H a multiple of the block size)" : "",
             " to quantize");
  // The float weights that only the rewritten nodes read go (and their
  // graph inputs, where an older exporter listed initializers as inputs).
  auto gone = [&](const std::string& name) { return replaced.count(name) > 0 && !still_read.count(name); };
  auto* inits = graph->mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(), [&](const TensorProto& t) { return gone(t.name()); }),
               inits->end());
  auto* inputs = graph->mutable_input();
  inputs->erase(std::remove_if(inputs->begin(), inputs->end(), [&](const auto& v) { return gone(v.name()); }),
                inputs->end());
  bool has_domain = false;
  for (const auto& i : model.opset_import()) has_domain |= i.domain() == "com.microsoft";
  if (!has_domain) {
    auto* i = model.add_opset_import();
    i->set_domain("com.microsoft");
    i->set_version(1);
  }
  std::stable_sort(
      result.report.layers.begin(), result.report.layers.end(),
      [](const QuantizedLayer& a, const QuantizedLayer& b) { return a.relative_error > b.relative_error; });
  KILN_CHECK(model.SerializeToString(&result.model), "quantize_weights: the quantized model does not serialize");
  return result;
}

}  // namespace kiln

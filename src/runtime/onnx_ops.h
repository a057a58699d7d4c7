#pragma once
// Importing ONNX nodes: one converter per ONNX op type, which computes the
// node's outputs with Kiln ops. Run under the tracer, the converters build
// Kiln's graph IR; shapes and other values a converter reads (a Reshape's
// shape, a Slice's starts) must be constants of the model, which they are
// in files written by torch.onnx.export and by Kiln.
#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "io/onnx_tensor.h"
#include "kiln/op_onnx.h"
#include "kiln/tensor.h"

namespace kiln::runtime {

using onnx_io::Unsupported;

// One node as a converter sees it: attributes with defaults, and the opset
// of its domain, for ops whose signature changed between versions. Ops'
// own readers (OpDef::onnx_import) see it as a kiln::OnnxReader.
class OnnxNode : public OnnxReader {
 public:
  OnnxNode(const ::onnx::NodeProto& proto, int opset);
  const ::onnx::NodeProto& proto() const { return proto_; }
  const std::string& op_type() const override { return proto_.op_type(); }
  int opset() const override { return opset_; }
  size_t num_outputs() const override { return static_cast<size_t>(proto_.output_size()); }
  bool output_wanted(size_t i) const override {
    return i < num_outputs() && !proto_.output(static_cast<int>(i)).empty();
  }
  std::string where() const override;  // "node 'conv1' (Conv, opset 17)"

  bool has(const std::string& name) const override;
  int64_t i(const std::string& name, int64_t fallback) const override;
  double f(const std::string& name, double fallback) const override;
  std::string s(const std::string& name, const std::string& fallback) const override;
  std::vector<int64_t> ints(const std::string& name, const std::vector<int64_t>& fallback = {}) const override;
  std::vector<double> floats(const std::string& name) const override;
  std::vector<std::string> strings(const std::string& name) const override;
  DType dtype(const std::string& name) const override;
  const ::onnx::TensorProto* tensor(const std::string& name) const;

  [[noreturn]] void fail_with(const std::string& message) const override;
  [[noreturn]] void unsupported_with(const std::string& message) const override;

 private:
  const ::onnx::AttributeProto* attr(const std::string& name) const;
  const ::onnx::NodeProto& proto_;
  int opset_;
};

// inputs[i] is undefined for an omitted optional input. Returns one tensor per
// node output (trailing ones may be omitted when not wanted).
using Converter = std::function<std::vector<Tensor>(const OnnxNode&, const std::vector<Tensor>&)>;
using ConverterTable = std::map<std::string, Converter>;

// The converters of the default ONNX domain, by op type: the runtime's own
// (ONNX ops that are compositions of Kiln ops, or that ops read differently
// by opset) and every op's reader (OpDef::onnx_import).
const ConverterTable& converters();
// The converter of a node's type: the default domain's from converters(), a
// custom domain's from the op of a loaded package that reads it; nullptr
// when there is none.
const Converter* find_converter(const std::string& domain, const std::string& op_type);
void add_elementwise_converters(ConverterTable& table);
void add_shape_converters(ConverterTable& table);
void add_reduce_converters(ConverterTable& table);
void add_norm_converters(ConverterTable& table);
void add_quant_converters(ConverterTable& table);
void add_attention_converters(ConverterTable& table);
void add_contrib_converters(ConverterTable& table);

// The inputs of an op type that converters read as values (shapes, axes,
// bounds) rather than compute with: a graph input feeding one of them is
// bound by value when the graph is compiled.
const std::vector<int>& value_inputs(const std::string& op_type);

// float16 and bfloat16 inputs computed in float32 and the results rounded
// once at the end, as ONNX's reference does: most Kiln kernels have no
// half-precision form, and composite ops would round at every step. For
// the ONNX converters and MindIR's primitive readers alike.
std::vector<Tensor> computed_in_float32(const std::vector<Tensor>& in,
                                        const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& compute);

// Helpers shared by the converter files (the rest are OnnxReader's).
inline std::vector<int64_t> int_values(const OnnxReader& n, const Tensor& t, const char* what) {
  return n.int_values(t, what);
}
inline double scalar_value(const OnnxReader& n, const Tensor& t, const char* what) { return n.scalar_value(t, what); }
// `axis` in [-rank, rank) to [0, rank), or a clear error.
inline int64_t normalize_axis(const OnnxReader& n, int64_t axis, int64_t rank) { return n.axis(axis, rank); }
// Required input i.
inline const Tensor& input(const OnnxReader& n, const std::vector<Tensor>& in, size_t i) { return n.input(in, i); }
// A tensor holding `value` with x's dtype, shaped to broadcast.
Tensor scalar_like(double value, const Tensor& x);
// 1 / sqrt(mean(x^2 over axes) + eps), the axes kept: RMS normalization's
// factor, for every form of it the converters read.
Tensor inverse_rms(const Tensor& x, const std::vector<int64_t>& axes, double eps);

}  // namespace kiln::runtime

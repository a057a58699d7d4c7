#pragma once
// How an op writes itself as ONNX (default domain, opsets 13 to 17). Each op
// carries its writer in its own definition; the exporter (io) implements
// OnnxWriter, so op files never see protobuf, and the op table lists exactly
// the ONNX op types a writer may emit (the exporter refuses any other).
#include <functional>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/tensor.h"

namespace kiln {

struct TensorMeta;

// One Kiln node being written, and the graph being built. Values are ONNX
// names; "" stands for an omitted optional input.
class OnnxWriter {
 public:
  virtual ~OnnxWriter() = default;

  // The Kiln node.
  virtual const Attrs& attrs() const = 0;
  virtual size_t num_inputs() const = 0;
  virtual std::string in(size_t i) const = 0;  // "" when input i is omitted (or past the last)
  virtual const TensorMeta& in_meta(size_t i = 0) const = 0;
  virtual size_t num_outputs() const = 0;
  virtual const std::string& out(size_t i = 0) const = 0;
  virtual const TensorMeta& out_meta(size_t i = 0) const = 0;
  virtual bool output_used(size_t i) const = 0;  // read by another node or returned
  virtual bool dynamic_batch() const = 0;         // axis 0 of the inputs is symbolic
  virtual int opset() const = 0;                  // of the default domain being written
  virtual std::string where() const = 0;          // "'conv2d' (output 't12')", for errors

  // Building the ONNX graph. Attributes convert as int -> INT, float ->
  // FLOAT, bool -> INT, ints -> INTS, floats -> FLOATS, string -> STRING,
  // dtype -> INT (the ONNX element type).
  virtual void node(const std::string& op_type, const std::vector<std::string>& inputs,
                    const std::vector<std::string>& outputs, const Attrs& attrs = {}) = 0;
  virtual std::string unique(const std::string& hint) = 0;  // a fresh value name
  virtual std::string initializer(const Tensor& value, const std::string& hint) = 0;

  // Conveniences over the above.
  DType dtype() const;  // input 0's
  const Shape& in_shape(size_t i = 0) const;
  const Shape& out_shape(size_t i = 0) const;
  std::vector<std::string> inputs() const;   // every input, "" where omitted
  std::vector<std::string> outputs() const;  // every output
  std::string ints(const std::vector<int64_t>& values, const std::string& hint);  // an int64 vector
  std::string scalar(double value, DType dtype, const std::string& hint);       // a 0-d tensor
  std::string filled(const Shape& shape, double value, DType dtype, const std::string& hint);
  // Input i, or a tensor of `shape` filled with `value` where it is omitted
  // (optional weights that ONNX requires).
  std::string in_or_filled(size_t i, const Shape& shape, double value, const std::string& hint);
  // Refuses a node whose outputs from `from` on are used: ONNX has no such
  // output (saved statistics, argmax indices, dropout masks).
  void require_unused_from(size_t from, const char* what) const;
};

using OnnxWriteFn = std::function<void(OnnxWriter&)>;

// An op's ONNX form: the op types its writer emits, and the writer.
struct OnnxExport {
  std::vector<std::string> types;
  OnnxWriteFn write;
  explicit operator bool() const { return static_cast<bool>(write); }
};

// The one-node forms: the op's inputs and outputs as they are, under
// `op_type`, with `attrs` (none by default).
OnnxExport onnx_as(const std::string& op_type);
// The same with attributes computed from the Kiln node.
OnnxExport onnx_as(const std::string& op_type, std::function<Attrs(const OnnxWriter&)> attrs);

}  // namespace kiln

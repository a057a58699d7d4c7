#pragma once
// How an op writes itself as ONNX (default domain, opsets 13 to 17) and how
// it reads ONNX nodes back. Each op carries its writer and its reader in its
// own definition; the exporter (io) implements OnnxWriter and the runtime
// OnnxReader, so op files never see protobuf. The op table lists exactly the
// ONNX op types a writer may emit (the exporter refuses any other) and those
// a reader takes.
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kiln/attrs.h"
#include "kiln/error.h"
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

// One ONNX node being read (any opset the runtime loads), with its
// attributes' defaults given by the caller, as ONNX's operator specs state them.
class OnnxReader {
 public:
  virtual ~OnnxReader() = default;
  virtual const std::string& op_type() const = 0;
  virtual int opset() const = 0;  // of the node's domain
  virtual size_t num_outputs() const = 0;
  virtual bool output_wanted(size_t i) const = 0;  // named, so a later node or the graph may read it
  virtual bool has(const std::string& name) const = 0;
  virtual int64_t i(const std::string& name, int64_t fallback) const = 0;
  virtual double f(const std::string& name, double fallback) const = 0;
  virtual std::string s(const std::string& name, const std::string& fallback) const = 0;
  virtual std::vector<int64_t> ints(const std::string& name, const std::vector<int64_t>& fallback = {}) const = 0;
  virtual std::vector<double> floats(const std::string& name) const = 0;
  virtual std::vector<std::string> strings(const std::string& name) const = 0;
  virtual std::string where() const = 0;  // "node 'conv1' (Conv, opset 17)"
  // Errors that name the node: a malformed model, or a valid one Kiln cannot
  // run (which the runtime lists with the other unsupported nodes).
  [[noreturn]] virtual void fail_with(const std::string& message) const = 0;
  [[noreturn]] virtual void unsupported_with(const std::string& message) const = 0;

  // (They throw; the abort only tells the compiler so through the virtual call.)
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    fail_with(detail::concat(args...));
    std::abort();
  }
  template <typename... Args>
  [[noreturn]] void unsupported(const Args&... args) const {
    unsupported_with(detail::concat(args...));
    std::abort();
  }
  // A dtype attribute given as an ONNX element type (Cast's `to`); required.
  virtual DType dtype(const std::string& name) const = 0;

  // Input i, which must be present.
  const Tensor& input(const std::vector<Tensor>& in, size_t i) const;
  // Input i, or an undefined tensor where the node omits it.
  static Tensor optional(const std::vector<Tensor>& in, size_t i) { return i < in.size() ? in[i] : Tensor(); }
  // `axis` in [-rank, rank) to [0, rank), or an error naming the node.
  int64_t axis(int64_t axis, int64_t rank) const;
  int64_t required_i(const std::string& name) const;
  // The `axes` of a node that takes them as input `index` from opset `since`
  // on and as an attribute before (Reduce*, Squeeze, Unsqueeze); as given,
  // possibly negative; empty where there are none.
  std::vector<int64_t> axes_input(const std::vector<Tensor>& in, size_t index, int since) const;
  // The values of an integer input (a shape, axes, pads, ...), which must be
  // present, and of a one-element input.
  std::vector<int64_t> int_values(const Tensor& t, const char* what) const;
  double scalar_value(const Tensor& t, const char* what) const;
  // Refuses a tensor of `shape` that the node would create from values in
  // the model (ConstantOfShape, Expand, Tile, Range) when it is absurdly large.
  void check_created_size(const Shape& shape) const;
};

// Computes a node's outputs with Kiln ops (one per node output; trailing ones
// that are not wanted may be left out). Inputs omitted in the node are
// undefined tensors. Run under the tracer, this builds the graph.
using OnnxReadFn = std::function<std::vector<Tensor>(const OnnxReader&, const std::vector<Tensor>&)>;

// The ONNX op types (default domain) an op reads, and how.
struct OnnxImport {
  std::vector<std::string> types;
  OnnxReadFn read;
  // Inputs the reader needs the values of (shapes, axes), not only to compute
  // with: a graph input feeding one is bound by value when compiled.
  std::vector<int> value_inputs;
  // float16 and bfloat16 inputs are computed in float32 and the results
  // rounded once, unless the op only moves data (then false).
  bool widen_half = true;
  explicit operator bool() const { return static_cast<bool>(read); }
};

// A reader of these types; by default it needs no input's value and widens
// half floats (see OnnxImport).
inline OnnxImport onnx_reader(std::vector<std::string> types, OnnxReadFn read, std::vector<int> value_inputs = {},
                              bool widen_half = true) {
  OnnxImport r;
  r.types = std::move(types);
  r.read = std::move(read);
  r.value_inputs = std::move(value_inputs);
  r.widen_half = widen_half;
  return r;
}

// Before opset 7, binary ops broadcast only with broadcast=1, aligning b's
// axes to a's from `axis` (default: the trailing axes, as numpy does): b
// reshaped so that it broadcasts the modern way.
Tensor onnx_legacy_broadcast(const OnnxReader& node, const Tensor& a, const Tensor& b);

}  // namespace kiln

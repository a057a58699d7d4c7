#pragma once
// A model prepared for running, whatever file it came from (ONNX, MindIR):
// its inputs and outputs described, and run() computing the outputs with
// Kiln ops, node by node; under the tracer that becomes a Kiln graph, which
// InferenceSession compiles.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::runtime {

// Thrown, under the tracer, when a branch or a trip count depends on a value
// computed from the model's inputs: such a model runs node by node instead.
struct DataDependentControlFlow : Error {
  using Error::Error;
};

class Program {
 public:
  virtual ~Program() = default;
  virtual const std::vector<TensorInfo>& inputs() const = 0;
  virtual const std::vector<TensorInfo>& outputs() const = 0;
  virtual const std::map<std::string, std::string>& metadata() const = 0;
  virtual int opset() const = 0;  // ONNX's default-domain opset; 0 for other formats
  virtual const std::string& producer() const = 0;
  // Per input: whether a converter reads its values (a shape given as an input).
  virtual const std::vector<bool>& bound_by_value() const = 0;
  // What was rewritten in the model before it runs ("12 Conv on int8
  // kernels"), "" when nothing.
  virtual const std::string& rewrites() const {
    static const std::string none;
    return none;
  }
  // Inputs already passed check_inputs (InferenceSession::run checks them once).
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) const = 0;

  // Throws naming the input, the expected and the given dtype and shape.
  void check_inputs(const std::vector<Tensor>& inputs) const;
};

// The program of a model file's bytes: MindIR (MindSpore's export) or ONNX,
// told apart by their first bytes. `what` names the source in errors.
std::unique_ptr<Program> load_program(const std::string& bytes, const std::string& what);
// Whether the bytes start like a MindIR model (its ir_version is a string,
// ONNX's a number).
bool looks_like_mindir(const std::string& bytes);

// `program` run under autocast in `dtype` (bfloat16 or float16), its floating
// outputs cast back to the dtypes it declares (SessionOptions::precision).
std::unique_ptr<Program> autocast_program(std::unique_ptr<Program> program, DType dtype);

}  // namespace kiln::runtime

#pragma once
// An ONNX model checked and prepared for running: every node resolved to its
// converter, values numbered, initializers read. run() executes the nodes in
// order with Kiln ops; under the tracer that becomes a Kiln graph.
#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime.h"
#include "runtime/onnx_ops.h"

namespace kiln::runtime {

class OnnxProgram {
 public:
  // `what` names the source in errors (a path). Throws Error for a malformed
  // model and onnx_io::Unsupported, listing every problem, for one Kiln cannot run.
  OnnxProgram(const std::string& bytes, const std::string& what);

  const std::vector<TensorInfo>& inputs() const { return inputs_; }
  const std::vector<TensorInfo>& outputs() const { return outputs_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int opset() const { return opset_; }
  // Per input: whether a converter reads its values (a shape given as an input).
  const std::vector<bool>& bound_by_value() const { return bound_by_value_; }
  const std::string& producer() const { return producer_; }

  // Throws naming the input, the expected and the given dtype and shape.
  void check_inputs(const std::vector<Tensor>& inputs) const;
  // Inputs already passed check_inputs (InferenceSession::run checks them once).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

 private:
  struct Step {
    const ::onnx::NodeProto* proto;
    const Converter* convert;
    std::vector<int> inputs;  // value slots; -1 for an omitted optional input
    std::vector<int> outputs;
    std::vector<int> release;  // value slots read for the last time here
  };
  ::onnx::ModelProto model_;
  std::string what_;
  int opset_ = 0;
  std::string producer_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<int> input_slots_, output_slots_;
  std::vector<bool> bound_by_value_;
  std::vector<Tensor> constants_;  // per slot: initializers, undefined elsewhere
  std::vector<Step> steps_;
};

}  // namespace kiln::runtime

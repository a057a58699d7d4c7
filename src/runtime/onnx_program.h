#pragma once
// An ONNX model checked and prepared for running: its graph (and the
// subgraphs of If, Loop and Scan) resolved, its inputs and outputs described.
// run() executes the nodes in order with Kiln ops; under the tracer that
// becomes a Kiln graph.
#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/runtime.h"
#include "runtime/onnx_graph.h"
#include "runtime/program.h"

namespace kiln::runtime {

class OnnxProgram : public Program {
 public:
  // `what` names the source in errors (a path). Throws Error for a malformed
  // model and onnx_io::Unsupported, listing every problem, for one Kiln cannot run.
  OnnxProgram(const std::string& bytes, const std::string& what);

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  int opset() const override { return opset_; }
  const std::vector<bool>& bound_by_value() const override { return bound_by_value_; }
  const std::string& producer() const override { return producer_; }
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override;
  const std::string& rewrites() const override { return rewrites_; }

 private:
  ::onnx::ModelProto model_;
  std::string what_;
  int opset_ = 0;
  std::string producer_;
  std::string rewrites_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<bool> bound_by_value_;
  std::unique_ptr<OnnxGraph> graph_;
};

}  // namespace kiln::runtime

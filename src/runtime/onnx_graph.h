#pragma once
// One graph of an ONNX model, resolved for running: the main graph, or the
// body of an If, Loop or Scan node. Nodes are resolved to their converters,
// values numbered, initializers read. A subgraph may read values of the
// graphs around it by name; those are captured from the enclosing run.
#include <onnx/onnx_pb.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/onnx_ops.h"
#include "runtime/program.h"

namespace kiln::runtime {

class OnnxGraph;

// An ONNX op whose attributes hold graphs (If, Loop, Scan): `subgraphs` by
// attribute name ("then_branch", "body"). `outer` holds the values of the
// enclosing graph's run, which the subgraphs capture from.
using Subgraphs = std::map<std::string, std::unique_ptr<OnnxGraph>>;
using ControlFlow = std::vector<Tensor> (*)(const OnnxNode& node, const std::vector<Tensor>& inputs,
                                            const Subgraphs& subgraphs, const std::vector<Tensor>& outer);
// The control-flow op types and their runners (onnx_control_flow.cpp).
const std::map<std::string, ControlFlow>& control_flow_ops();

class OnnxGraph {
 public:
  // `what` names the model in errors. Names the graph does not define are
  // looked up in `outer` (null for the main graph).
  OnnxGraph(const ::onnx::GraphProto& graph, int opset, const std::string& what, OnnxGraph* outer);

  const ::onnx::GraphProto& proto() const { return *proto_; }
  // Inputs in order (initializers listed as inputs are not among them).
  size_t num_inputs() const { return input_slots_.size(); }
  size_t num_outputs() const { return output_slots_.size(); }
  // The graph input names (for the graph's `inputs`, the main graph only).
  const std::vector<const ::onnx::ValueInfoProto*>& input_protos() const { return input_protos_; }

  // Runs the graph on its inputs; `outer` holds the enclosing run's values
  // (for a subgraph).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outer = {}) const;

  // Per graph input: whether a converter reads its values (a shape given as
  // an input, a flag an If branches on), through any computation but Shape
  // and Size, here or in a subgraph.
  std::vector<bool> inputs_bound_by_value() const;

 private:
  struct Step {
    const ::onnx::NodeProto* proto;
    const Converter* convert;  // null for control flow
    ControlFlow control = nullptr;
    Subgraphs subgraphs;
    std::vector<int> inputs;   // value slots; -1 for an omitted optional input
    std::vector<int> outputs;
    std::vector<int> release;  // value slots read for the last time here
  };
  int define(const std::string& name, const std::string& by);
  // The slot of `name`, capturing it from the enclosing graphs when needed; -1 when nothing defines it.
  int resolve(const std::string& name);
  void plan_releases();
  // Per seed slot: whether its value reaches an input that a converter reads
  // as a value, here or in a subgraph; through a branch's condition or a trip
  // count only where control_may_bind says so.
  std::vector<bool> reaches_value_inputs(const std::vector<int>& seeds, const std::vector<bool>& control_may_bind) const;

  const ::onnx::GraphProto* proto_;
  int opset_;
  std::string what_;
  OnnxGraph* outer_;
  std::unordered_map<std::string, int> slot_;
  std::vector<Tensor> constants_;  // per slot: initializers, undefined elsewhere
  std::vector<std::pair<int, int>> captures_;  // (slot in the enclosing graph, own slot)
  std::vector<int> input_slots_, output_slots_;
  std::vector<const ::onnx::ValueInfoProto*> input_protos_;
  std::vector<Step> steps_;
};

// Every node type in `graph` and its subgraphs that the runtime cannot run,
// as "domain::Op (opset N)" -> node names, for one error that lists them all.
void find_unsupported(const ::onnx::GraphProto& graph, const std::map<std::string, int>& opsets,
                      std::map<std::string, std::vector<std::string>>& missing, std::set<std::string>& types);

}  // namespace kiln::runtime

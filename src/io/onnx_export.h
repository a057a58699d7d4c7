#pragma once
// The state shared by the ONNX exporter and the op writers it runs: each op
// writes itself through kiln::OnnxWriter (its definition's `onnx` facet);
// onnx_node_writer.cpp implements that interface on this context.
#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace kiln::onnx_io {

struct ExportContext {
  const graph::Graph& g;
  ::onnx::GraphProto& out;
  bool dynamic_batch = false;
  int opset = 17;
  std::vector<std::string> names;  // value id -> ONNX name
  std::map<std::string, int> taken;
  std::set<std::string> domains;  // custom ONNX domains the nodes use (op packages')

  // A name not used yet, from a hint.
  std::string unique(const std::string& hint);
  const std::string& name(int value) const { return names.at(value); }
  // Adds a node; trailing omitted ("") inputs are dropped.
  ::onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs);
};

// Kiln attributes as ONNX attributes of `n` (see kiln::OnnxWriter::node).
void set_attrs(::onnx::NodeProto& n, const Attrs& attrs);

// Writes one Kiln node as ONNX nodes with its op's writer. The op must have one.
void export_node(ExportContext& ctx, const graph::Node& n);

}  // namespace kiln::onnx_io

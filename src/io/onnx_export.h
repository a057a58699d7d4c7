#pragma once
// The state shared by the ONNX exporter and its per-op writers.
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace kiln::onnx_io {

struct ExportContext {
  const graph::Graph& g;
  ::onnx::GraphProto& out;
  bool dynamic_batch = false;
  std::vector<std::string> names;  // value id -> ONNX name
  std::map<std::string, int> taken;

  // A name not used yet, from a hint.
  std::string unique(const std::string& hint);
  const std::string& name(int value) const { return names.at(value); }
  const TensorMeta& meta(int value) const { return g.values.at(value).meta; }
  // Adds a node; returns it for attributes.
  ::onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs);
  // An int64 initializer (shapes, axes, pads), named from the hint.
  std::string ints(const std::vector<int64_t>& values, const std::string& hint);
  // A 0-d initializer of `dtype` holding `value`.
  std::string scalar(double value, DType dtype, const std::string& hint);
};

void set_attr(::onnx::NodeProto& n, const std::string& name, int64_t v);
void set_attr(::onnx::NodeProto& n, const std::string& name, float v);
void set_attr(::onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
void set_attr(::onnx::NodeProto& n, const std::string& name, const std::string& v);

// Writes one Kiln node as ONNX nodes. Returns false when the op has no writer.
bool export_node(ExportContext& ctx, const graph::Node& n);
bool can_export(const std::string& op);

}  // namespace kiln::onnx_io

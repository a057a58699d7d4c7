#pragma once
// ONNX export of a Cell, and ONNX tensor files.
//
//   kiln::export_model(net, {kiln::zeros({1, 1, 28, 28})}, "model.onnx", {.dynamic_batch = true});
//
// Export traces the Cell in inference mode (set_train(false): dropout is
// gone, batch norm folds into the preceding convolution), constant-folds the
// graph, and writes it with its weights as one self-contained ONNX file.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {
namespace nn {
class Cell;
}

struct ExportOptions {
  std::vector<std::string> input_names;   // default: "input", "input_1", ...
  std::vector<std::string> output_names;  // default: "output", "output_1", ...
  // Axis 0 of every input and output becomes the symbolic dimension "batch";
  // otherwise the shapes of the sample inputs are fixed in the file.
  bool dynamic_batch = false;
  int opset = 17;                              // 13 to 17
  std::string graph_name = "kiln";
  std::map<std::string, std::string> metadata;  // metadata_props, e.g. {"recipe", yaml text}
};

struct ExportReport {
  size_t nodes = 0, initializers = 0;
  int64_t weight_bytes = 0;
  std::map<std::string, int> op_counts;  // ONNX op type -> nodes
  std::string str() const;
};

// Writes atomically (temporary file, then rename). Throws, listing every Kiln
// op in the graph that has no ONNX form, before writing anything.
ExportReport export_model(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& sample_inputs,
                          const std::string& path, const ExportOptions& options = {});
// The same, returning the serialized ModelProto.
std::string export_model_bytes(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& sample_inputs,
                               const ExportOptions& options = {}, ExportReport* report = nullptr);

// ONNX TensorProto files (.pb), as the ONNX test data and `kiln run` use.
Tensor load_tensor_pb(const std::string& path);
void save_tensor_pb(const std::string& path, const Tensor& t, const std::string& name = "");

}  // namespace kiln

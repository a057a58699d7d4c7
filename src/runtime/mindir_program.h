#pragma once
// A MindIR model (MindSpore's export(..., file_format="MINDIR")) prepared
// for running. Each node applies a primitive; the primitives Kiln's ops read
// (OpDef::mindspore_import) compute with Kiln ops, and the bookkeeping ones
// (MakeTuple, TupleGetItem, Depend, Load, UpdateState) only route values.
// Everything a model needs that Kiln lacks is listed at once, when it loads.
#include <memory>
#include <string>
#include <vector>

#include "runtime/program.h"

namespace kiln::runtime {

class MindirProgram : public Program {
 public:
  // `what` names the source in errors. Throws Error for a malformed model
  // and UnsupportedError, listing every primitive Kiln lacks, with its nodes.
  MindirProgram(const std::string& bytes, const std::string& what);
  ~MindirProgram() override;

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  int opset() const override { return 0; }
  const std::string& producer() const override { return producer_; }
  const std::vector<bool>& bound_by_value() const override { return bound_by_value_; }
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const override;

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
  std::string producer_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<bool> bound_by_value_;
};

}  // namespace kiln::runtime

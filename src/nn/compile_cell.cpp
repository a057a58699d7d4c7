// jit::compile for a Cell: its construct traced without gradients, its
// parameters, buffers and sub-Cells named in the graph and in errors.
#include "kiln/grad_mode.h"
#include "nn/captured_cell.h"

namespace kiln {
namespace nn::detail {

jit::CapturedCell capture(std::shared_ptr<Cell> cell) {
  jit::CapturedCell captured;
  Cell* raw = cell.get();
  captured.type_name = raw->type_name();
  for (auto& named : raw->parameters_and_names()) captured.tensors.push_back(std::move(named));
  for (auto& named : raw->buffers_and_names()) captured.tensors.push_back(std::move(named));
  std::function<void(const std::string&, Cell&)> walk = [&](const std::string& path, Cell& c) {
    captured.cells.emplace_back(path, c.type_name(), &c);
    for (auto& [name, child] : c.children()) walk(path.empty() ? name : path + "." + name, *child);
  };
  walk("", *raw);
  captured.training = [raw] { return raw->training(); };
  captured.owner = std::move(cell);
  return captured;
}

}  // namespace nn::detail

namespace jit {

CompiledFunction compile(std::shared_ptr<nn::Cell> cell, const std::vector<Tensor>& example_inputs,
                         CompileOptions options) {
  KILN_CHECK(cell != nullptr, "jit::compile: the Cell is null");
  nn::Cell* raw = cell.get();
  Function fn = [raw](const std::vector<Tensor>& in) -> std::vector<Tensor> {
    KILN_CHECK(in.size() == 1, "a compiled Cell takes one input, got ", in.size());
    NoGradGuard no_grad;  // inference: a compiled training step computes gradients itself
    return {(*raw)(in[0])};
  };
  if (options.name == "function") options.name = cell->type_name();
  auto impl = make_impl(std::move(fn), std::move(options), nn::detail::capture(std::move(cell)));
  if (!example_inputs.empty()) impl->run(example_inputs);
  return CompiledFunction(impl);
}

}  // namespace jit
}  // namespace kiln

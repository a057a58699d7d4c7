#pragma once
// Elementwise fusion, backend-neutral: a chain (or tree) of elementwise ops
// over one shape, in one dtype the backend's lowering takes (float32 on the
// CPU; the 16-bit floats too on CUDA, computed in float), becomes an
// expression (the chain of the ops' formulas and their operands), which the
// graph's backend lowers to
// one kernel that streams blocks of elements through all of them, so the
// intermediate values never go to memory. The CPU lowers through its block
// loops (src/backends/cpu/passes/elementwise_lowering.cpp); a device backend
// instantiates the formulas (ops/elementwise_formulas.h) or generates source.
#include <memory>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace kiln::graph {

// Steps per expression at most: a backend's loop keeps each step's block in registers.
constexpr size_t kMaxFusedSteps = 12;

struct ElementwiseExpression {
  // A kernel input (index into the fused node's inputs), or the result of an earlier step.
  struct Operand {
    bool external = true;
    int index = 0;
  };
  struct Step {
    const OpDef* op = nullptr;  // its formula: op->math
    Attrs attrs;
    Operand a, b;  // b for binary formulas
  };
  std::vector<Step> steps;  // in order; the last gives the output
  DType dtype = DType::Float32;  // of every input and the output
};

// How a backend runs an expression: a kernel from the fused node's inputs to
// its output, which takes every size from those tensors when it runs; or
// none, where the backend cannot (the group's ops then stay as they are).
using ElementwiseLowering = CustomKernel (*)(const ElementwiseExpression& expression);
void register_elementwise_lowering(DeviceType backend, ElementwiseLowering lower,
                                   std::vector<DType> dtypes = {DType::Float32});

// The pass: where the graph's backend lowers expressions, each fusible group
// becomes one node running the lowered kernel (a backend lists the pass
// among its own, where its layouts are already chosen).
std::string fuse_elementwise(Graph& g);

}  // namespace kiln::graph

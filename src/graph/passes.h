#pragma once
// Graph-to-graph rewrites. Each returns a one-line summary of what it changed
// ("" when nothing), for the compile report.
#include <string>

#include "graph/ir.h"

namespace kiln::graph {

std::string eliminate_dead_code(Graph& g);
std::string eliminate_common_subexpressions(Graph& g);
std::string fold_constants(Graph& g);
std::string simplify_algebra(Graph& g);
std::string fold_batch_norm(Graph& g);  // inference graphs only

}  // namespace kiln::graph

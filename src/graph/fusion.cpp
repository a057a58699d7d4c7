#include "graph/passes.h"

namespace kiln::graph {

std::string fuse_conv_activation(Graph&) { return ""; }
std::string fuse_elementwise(Graph&) { return ""; }

}  // namespace kiln::graph

#pragma once
// Graphs across backends: on a device whose memory the host cannot read,
// the nodes its backend has no kernel for (or whose call its kernel does
// not take) move to the CPU, with explicit to_device nodes where values
// cross, so that each side runs on its own memory and the copies show in
// the graph, the profile and the compile report.
#include <string>
#include <vector>

#include "graph/ir.h"

namespace kiln::graph {

// Places g's nodes for `device`: a node stays there when its backend takes
// it, goes to the CPU when only the CPU has a kernel (refused under
// strict_device), and views follow their input. Values then live on their
// node's device (TensorMeta::device); a transfer node copies a value to
// where a node of the other side reads it, once, and graph outputs come back
// to `device`. Returns the nodes moved, each as "op (why)".
std::vector<std::string> place_nodes(Graph& g, Device device);

}  // namespace kiln::graph

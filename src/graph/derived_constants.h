#pragma once
// Constants that passes derive from a captured tensor (a transposed weight,
// one reordered for oneDNN, Winograd's transform) are shared by every graph
// compiled from that tensor while its contents are unchanged: an inference
// session compiles one graph per input shape (a server warms up several
// batch sizes), and each would otherwise hold its own copy of every weight.
#include <functional>
#include <string>

#include "graph/ir.h"
#include "kiln/tensor.h"

namespace kiln::graph {

// The tensor make() returns for (source, kind), made once while some graph
// still holds it and the source has not been written since. kind names the
// derivation and everything it depends on besides the source.
Tensor shared_derived_constant(const Tensor& source, const std::string& kind, const std::function<Tensor()>& make);

// The same for constant value `source` of g: adds the derived tensor as a
// constant named after the source ("<name><suffix>") and returns its id.
// When `source` was itself derived, the derivations chain from its root.
int add_derived_constant(Graph& g, int source, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make);

}  // namespace kiln::graph

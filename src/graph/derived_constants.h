#pragma once
// Constants that passes derive from a captured tensor (a transposed weight,
// one reordered for oneDNN, Winograd's transform) are shared by every graph
// compiled from that tensor while its contents are unchanged: an inference
// session compiles one graph per input shape (a server warms up several
// batch sizes), and each would otherwise hold its own copy of every weight.
#include <functional>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "kiln/tensor.h"

namespace kiln::graph {

// The tensor make() returns for (sources, kind), made once while some graph
// still holds it and no source has been written since. kind names the
// derivation and everything it depends on besides the sources.
Tensor shared_derived_constant(const std::vector<Tensor>& sources, const std::string& kind,
                               const std::function<Tensor()>& make);
Tensor shared_derived_constant(const Tensor& source, const std::string& kind, const std::function<Tensor()>& make);

// The same for constant values `sources` of g (a weight, or the weights a
// pass merges): adds the derived tensor as a constant named after the first
// ("<name><suffix>") and returns its id. Where a source was itself derived,
// the derivations chain from its roots.
int add_derived_constant(Graph& g, const std::vector<int>& sources, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make);
int add_derived_constant(Graph& g, int source, const std::string& kind, const std::string& suffix,
                         const std::function<Tensor()>& make);

}  // namespace kiln::graph

#pragma once
// How graph mode sees a Cell: the nn layer describes it (names, paths, mode)
// so that the graph layer below never needs to know what a Cell is.
#include <memory>

#include "graph/compiled.h"
#include "kiln/nn.h"

namespace kiln::nn::detail {

jit::CapturedCell capture(std::shared_ptr<Cell> cell);

}  // namespace kiln::nn::detail

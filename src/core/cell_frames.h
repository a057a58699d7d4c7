#pragma once
// The Cells being called on this thread, outermost first. nn pushes a frame
// for every Cell call; the tracer reads them to name the user's Cell in its
// errors. Core only keeps the stack: a frame is opaque to it.
#include <string>
#include <vector>

namespace kiln::detail {

struct CellFrame {
  const void* cell;
  const std::string* type;  // "MyNet", "Dense": owned by the Cell, alive while it runs
  bool library;             // a Cell that Kiln defines (kiln::nn, kiln::models), not the user's
};

std::vector<CellFrame>& cell_frames();

}  // namespace kiln::detail

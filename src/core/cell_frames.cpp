#include "core/cell_frames.h"

namespace kiln::detail {

std::vector<CellFrame>& cell_frames() {
  thread_local std::vector<CellFrame> frames;
  return frames;
}

}  // namespace kiln::detail

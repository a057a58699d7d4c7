#pragma once
// How many times `what` occurs in `text` (overlapping ones too): a graph
// dump's ops of one kind, a report's lines.
#include <cstddef>
#include <string>

namespace kiln::testing {
inline size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace kiln::testing

#pragma once
// Recognises a file by its first bytes, so that a reader handed the wrong kind
// of file can say what it is and what to do, instead of a parse error.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::io::detail {

// "a PyTorch checkpoint (torch.save zip); convert it with ..." or "" when the
// bytes match no format Kiln knows.
std::string foreign_format_hint(const uint8_t* bytes, size_t size, const std::string& path);

}  // namespace kiln::io::detail

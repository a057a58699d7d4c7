#pragma once
// Writing a file so that readers see the old one or the whole new one, never
// a part: a temporary file in the same folder, fsync, rename, fsync of the
// folder. A failure (full disk, no permission) throws and leaves any old file.
#include <string>
#include <utility>
#include <vector>

namespace kiln::io {

using ByteChunks = std::vector<std::pair<const void*, size_t>>;
void write_file_atomic(const std::string& path, const ByteChunks& chunks);

}  // namespace kiln::io

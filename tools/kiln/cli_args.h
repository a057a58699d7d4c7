#pragma once
// Argument parsing shared by the CLI's commands.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::cli {

// "1,1,28,28" -> {1, 1, 28, 28}: positive integers, or an error naming `what`.
std::vector<int64_t> parse_ints(const std::string& text, const char* what);

}  // namespace kiln::cli

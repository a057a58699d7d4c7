#pragma once
// Argument parsing shared by the CLI's commands.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::cli {

// "1,1,28,28" -> {1, 1, 28, 28}: positive integers, or an error naming `what`.
std::vector<int64_t> parse_ints(const std::string& text, const char* what);
// A tensor from a .npy or an ONNX TensorProto .pb file.
Tensor load_input(const std::string& path);

}  // namespace kiln::cli

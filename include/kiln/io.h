#pragma once
// Tensor files. safetensors is the format of Kiln's checkpoints: an 8-byte
// little-endian header length, a JSON header (name -> dtype, shape, byte
// offsets; optional "__metadata__" of strings), then the raw tensor bytes.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes atomically: a temporary file in the same folder, fsync, rename. A
// failure (full disk, no permission) throws and leaves any old file intact.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;  // in file order
  std::map<std::string, std::string> metadata;
};
// Validates the header against the file size before reading anything.
SafetensorsFile load_safetensors(const std::string& path);

// Parameters and buffers of a cell, by their hierarchical names.
void save_cell(const nn::Cell& cell, const std::string& path, const std::map<std::string, std::string>& metadata = {});
// Loads a checkpoint into a cell. Every parameter and buffer must be in the
// file with the same shape and dtype, and the file may hold nothing else; all
// problems are listed at once.
void load_cell(nn::Cell& cell, const std::string& path);

}  // namespace kiln::io

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

// Writes atomically: a temporary file in the same folder, fsync, rename (and
// an fsync of the folder). A failure (full disk, no permission) throws and
// leaves any old file intact. The CRC-32 of the data goes into the metadata
// as "kiln.crc32"; readers check it when it is there.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  NamedTensors tensors;  // in file order
  std::map<std::string, std::string> metadata;
};
// Validates the header against the file size before reading anything.
SafetensorsFile load_safetensors(const std::string& path);

// A safetensors file mapped into memory: the header is parsed and validated,
// the checksum verified, and tensors are read from the mapping, so loading
// copies each byte once (into its destination).
class MappedSafetensors {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;
    size_t bytes;
  };
  explicit MappedSafetensors(const std::string& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::vector<Entry>& entries() const { return entries_; }  // in data order
  const Entry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  Tensor tensor(const Entry& e) const;  // a copy
  // Drops the pages of `e` from this process's memory (they stay in the page
  // cache and fault back in if read again): loading a large file then never
  // holds more than one tensor's pages at a time.
  void release(const Entry& e) const { release(e.data, e.bytes); }
  // Copies e's bytes to dst in chunks, releasing each chunk's pages after it.
  void copy_out(const Entry& e, void* dst) const;
  const std::string& path() const { return path_; }

 private:
  void release(const void* data, size_t bytes) const;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A PyTorch state dict saved by torch.save (the zip format of PyTorch 1.6
// and later), read without running Python: float32/64, float16, bfloat16,
// int64/32, uint8 and bool tensors; shared storages and views are resolved
// (each tensor comes back contiguous). Nested dicts give dotted names
// ("model.fc.weight"). Pickles that ask for anything but tensors and dicts
// are refused.
NamedTensors load_torch_file(const std::string& path);
// MindSpore's .ckpt (its Checkpoint protobuf): tensors by tag, in file order
// (a large tensor's slices are joined), and the strings saved beside them.
// Encrypted, truncated and sliced (distributed) files are refused, naming the
// problem. MindSpore's types without a Kiln dtype (int16, uint16/32/64) too.
struct MindsporeCheckpoint {
  NamedTensors tensors;
  std::map<std::string, std::string> strings;
};
MindsporeCheckpoint load_mindspore_checkpoint(const std::string& path);
// Writes atomically, in the form MindSpore's load_checkpoint reads.
void save_mindspore_checkpoint(const std::string& path, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& strings = {});
// Whether a file is to be read as a .ckpt: named so, or starting as one does.
bool is_mindspore_checkpoint(const std::string& path);

// safetensors, torch.save or MindSpore .ckpt file, told apart by their first bytes.
NamedTensors load_tensor_file(const std::string& path);

// Parameters and buffers of a cell, by their hierarchical names.
void save_cell(const nn::Cell& cell, const std::string& path, const std::map<std::string, std::string>& metadata = {});
struct LoadOptions {
  // Strict: every parameter and buffer must be in the file with its shape and
  // dtype, and the file may hold nothing else; any problem fails the load,
  // listing all of them, and nothing is changed. Non-strict: loads what
  // matches by name and shape (converting dtypes), and reports the rest.
  bool strict = true;
  bool print_report = true;  // non-strict: print the report when it is not clean
};

struct LoadReport {
  std::vector<std::string> loaded;
  std::vector<std::string> missing;     // in the cell, not in the file
  std::vector<std::string> unexpected;  // in the file, matching nothing in the cell
  std::vector<std::string> shape_mismatches;
  std::vector<std::string> converted;   // loaded with a dtype conversion
  bool clean() const { return missing.empty() && unexpected.empty() && shape_mismatches.empty() && converted.empty(); }
  std::string str() const;
};

// Loads a safetensors checkpoint (memory-mapped, checksum verified) or a
// MindSpore .ckpt into a cell. The optimizer part of a training checkpoint ("optimizer/..." entries)
// is not the cell's and is passed over.
LoadReport load_checkpoint(nn::Cell& cell, const std::string& path, const LoadOptions& options = {});
// The same from a file already mapped (its checksum checked once, when it was mapped).
LoadReport load_checkpoint(nn::Cell& cell, const MappedSafetensors& file, const LoadOptions& options = {});
// load_checkpoint, strict.
void load_cell(nn::Cell& cell, const std::string& path);

// NumPy .npy files (format 1.0-3.0, C order, little-endian): float32/64/16,
// int32/64, uint8, bool.
Tensor load_npy(const std::string& path);
Tensor parse_npy(const std::string& bytes, const std::string& what);
void save_npy(const std::string& path, const Tensor& t);

}  // namespace kiln::io

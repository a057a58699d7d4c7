#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <zlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/autograd.h"
#include "io/atomic_file.h"
#include "io/file_format.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

constexpr const char* kCrcKey = "kiln.crc32";
// Large files are checksummed and copied in chunks whose pages are released
// after use, so a load never holds much more of the file than this.
constexpr size_t kChunk = 16u << 20;

const char* st_dtype(DType d) {
  switch (d) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Float16: return "F16";
    case DType::BFloat16: return "BF16";
    case DType::Int32: return "I32";
    case DType::Int64: return "I64";
    case DType::UInt8: return "U8";
    case DType::Bool: return "BOOL";
    case DType::Int8: return "I8";
  }
  return "?";
}

DType from_st_dtype(const std::string& s, const std::string& path) {
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::UInt8, DType::Bool, DType::Int8})
    if (s == st_dtype(d)) return d;
  KILN_FAIL("'", path, "' holds a tensor of dtype ", s, ", which Kiln does not support");
}

// Extends a CRC-32 over n bytes in kChunk pieces (zlib takes uInt lengths),
// calling after_chunk(piece, bytes) after each.
template <typename AfterChunk>
uLong crc_extend(uLong crc, const void* data, size_t n, AfterChunk after_chunk) {
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, kChunk));
    crc = crc32(crc, p, chunk);
    after_chunk(p, chunk);
    p += chunk;
    n -= chunk;
  }
  return crc;
}

uint32_t crc_of(const std::vector<Tensor>& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const Tensor& c : tensors)
    crc = crc_extend(crc, c.raw_data(), static_cast<size_t>(c.numel()) * c.element_size(), [](const void*, size_t) {});
  return static_cast<uint32_t>(crc);
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::vector<Tensor> contiguous;
  size_t offset = 0;
  for (auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__" && !header.contains(name), "tensor name '", name, "' appears twice or is reserved");
    Tensor c = t.detach().to(cpu_device()).contiguous();  // (from a device: its copy on the host)
    size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::map<std::string, std::string> meta = metadata;
  meta[kCrcKey] = std::to_string(crc_of(contiguous));
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data
  uint64_t len = text.size();
  uint8_t le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));

  ByteChunks chunks = {{le, 8}, {text.data(), text.size()}};
  for (auto& c : contiguous) chunks.emplace_back(c.raw_data(), static_cast<size_t>(c.numel()) * c.element_size());
  write_file_atomic(path, chunks);
}

MappedSafetensors::MappedSafetensors(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  KILN_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    KILN_FAIL("'", path, "' is too short to be a safetensors file (", size_, " bytes)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  KILN_CHECK(map_ != MAP_FAILED, "cannot map '", path, "': ", std::strerror(errno));
  try {
    const auto* bytes = static_cast<const uint8_t*>(map_);
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | bytes[i];
    // A header length that fits the file, then the JSON header's brace: safetensors, whatever the length's
    // bytes resemble (a length of 0x108 starts as an ONNX model does). Otherwise, name the format it is.
    const bool safetensors_shape = len >= 2 && len <= size_ - 8 && bytes[8] == '{';
    std::string other = safetensors_shape ? "" : detail::foreign_format_hint(bytes, size_, path);
    KILN_CHECK(other.empty(), "'", path, "' is not a safetensors file: ", other);
    KILN_CHECK(len <= size_ - 8, "'", path, "' is truncated or not safetensors: its header claims ", len,
               " bytes but the file has ", size_ - 8, " after the length");
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(bytes + 8, bytes + 8 + len);
    } catch (const std::exception& e) {
      KILN_FAIL("'", path, "' has a malformed header: ", e.what());
    }
    // Data cut short (a copy or download that stopped): say so, with both sizes.
    uint64_t data_end = 0;
    if (header.is_object())
      for (auto& [name, e] : header.items())
        if (name != "__metadata__" && e.is_object() && e.contains("data_offsets") && e["data_offsets"].is_array() &&
            e["data_offsets"].size() == 2 && e["data_offsets"][1].is_number_unsigned())
          data_end = std::max(data_end, e["data_offsets"][1].get<uint64_t>());
    KILN_CHECK(data_end <= size_ - 8 - len, "'", path, "' is truncated: its header describes ", 8 + len + data_end,
               " bytes but the file has ", size_, ". The copy or download was cut short (or the disk filled while "
               "it was written): copy it again, or use an earlier checkpoint");
    KILN_CHECK(header.is_object(), "'", path, "' has a header that is not a JSON object");
    const uint64_t data_start = 8 + len, data_size = size_ - data_start;
    for (auto& [name, e] : header.items()) {
      if (name == "__metadata__") {
        KILN_CHECK(e.is_object(), "'", path, "': __metadata__ is not an object");
        for (auto& [k, v] : e.items())
          KILN_CHECK(v.is_string(), "'", path, "': metadata value '", k, "' is not a string");
        metadata_ = e.get<std::map<std::string, std::string>>();
        continue;
      }
      KILN_CHECK(e.is_object() && e.contains("dtype") && e["dtype"].is_string() && e.contains("shape") &&
                     e["shape"].is_array() && e.contains("data_offsets") && e["data_offsets"].is_array() &&
                     e["data_offsets"].size() == 2 && e["data_offsets"][0].is_number_unsigned() &&
                     e["data_offsets"][1].is_number_unsigned(),
                 "'", path, "': entry '", name, "' needs dtype, shape and two unsigned data_offsets");
      DType dtype = from_st_dtype(e["dtype"].get<std::string>(), path);
      Shape shape;
      uint64_t count = 1;
      for (auto& d : e["shape"]) {
        KILN_CHECK(d.is_number_unsigned(), "'", path, "': tensor '", name, "' has an invalid shape");
        uint64_t v = d.get<uint64_t>();
        KILN_CHECK(v <= (uint64_t{1} << 48) && (v == 0 || count <= (uint64_t{1} << 62) / v), "'", path, "': tensor '",
                   name, "' has a shape whose size overflows");
        count *= v;
        shape.push_back(static_cast<int64_t>(v));
      }
      uint64_t begin = e["data_offsets"][0].get<uint64_t>(), end = e["data_offsets"][1].get<uint64_t>();
      KILN_CHECK(begin <= end && end <= data_size && end - begin == count * dtype_size(dtype), "'", path,
                 "': tensor '", name, "' (", dtype_name(dtype), shape_str(shape), ") has offsets [", begin, ", ", end,
                 ") that do not fit its size or the file's ", data_size, " data bytes");
      entries_.push_back({name, dtype, shape, bytes + data_start + begin, static_cast<size_t>(end - begin)});
    }
    std::sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.data < b.data; });
    if (auto it = metadata_.find(kCrcKey); it != metadata_.end()) {
      uLong crc = crc32(0L, Z_NULL, 0);
      for (const Entry& e : entries_)
        crc = crc_extend(crc, e.data, e.bytes, [this](const void* p, size_t bytes) { release(p, bytes); });
      KILN_CHECK(std::to_string(static_cast<uint32_t>(crc)) == it->second, "'", path,
                 "' is corrupt: the checksum of its tensor data does not match the one stored when it was written");
    }
  } catch (...) {
    ::munmap(map_, size_);
    throw;
  }
}

MappedSafetensors::~MappedSafetensors() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, size_);
}

void MappedSafetensors::release(const void* data, size_t bytes) const {
  // Whole pages inside [data, data + bytes) only: neighbours may still be needed.
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  auto end = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void MappedSafetensors::copy_out(const Entry& e, void* dst) const {
  const char* src = static_cast<const char*>(e.data);
  char* out = static_cast<char*>(dst);
  for (size_t done = 0; done < e.bytes;) {
    size_t chunk = std::min<size_t>(e.bytes - done, kChunk);
    std::memcpy(out + done, src + done, chunk);
    release(src + done, chunk);
    done += chunk;
  }
}

const MappedSafetensors::Entry* MappedSafetensors::find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

Tensor MappedSafetensors::tensor(const Entry& e) const {
  Tensor t = Tensor::empty(e.shape, e.dtype);
  if (e.bytes) std::memcpy(t.raw_data(), e.data, e.bytes);
  return t;
}

SafetensorsFile load_safetensors(const std::string& path) {
  MappedSafetensors file(path);
  SafetensorsFile out;
  out.metadata = file.metadata();
  out.metadata.erase(kCrcKey);
  for (const auto& e : file.entries()) out.tensors.emplace_back(e.name, file.tensor(e));
  return out;
}

void save_cell(const nn::Cell& cell, const std::string& path, const std::map<std::string, std::string>& metadata) {
  NamedTensors all = cell.parameters_and_names();
  for (auto& b : cell.buffers_and_names()) all.push_back(b);
  save_safetensors(path, all, metadata);
}

}  // namespace kiln::io

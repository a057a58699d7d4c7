#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/autograd.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

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
  }
  return "?";
}

DType from_st_dtype(const std::string& s, const std::string& path) {
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::UInt8, DType::Bool})
    if (s == st_dtype(d)) return d;
  KILN_FAIL("'", path, "' holds a tensor of dtype ", s, ", which Kiln does not support");
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    KILN_CHECK(w > 0, "cannot write '", path, "': ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> contiguous;
  size_t offset = 0;
  for (auto& [name, t] : tensors) {
    KILN_CHECK(!header.contains(name), "tensor name '", name, "' appears twice");
    Tensor c = t.detach().contiguous();
    size_t bytes = static_cast<size_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", st_dtype(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    contiguous.push_back(c);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // align the data
  uint64_t len = text.size();

  std::filesystem::path target(path);
  std::string tmp = (target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path()).string() + "/." +
                    target.filename().string() + ".tmp" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  KILN_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  try {
    uint8_t le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<uint8_t>(len >> (8 * i));
    write_all(fd, le, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (auto& c : contiguous) write_all(fd, c.raw_data(), static_cast<size_t>(c.numel()) * c.element_size(), tmp);
    KILN_CHECK(::fsync(fd) == 0, "cannot flush '", tmp, "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    KILN_FAIL("cannot move the new file into place at '", path, "': ", std::strerror(err));
  }
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  f.seekg(0, std::ios::end);
  const uint64_t size = static_cast<uint64_t>(f.tellg());
  f.seekg(0);
  KILN_CHECK(size >= 8, "'", path, "' is too short to be a safetensors file (", size, " bytes)");
  uint8_t le[8];
  f.read(reinterpret_cast<char*>(le), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | le[i];
  KILN_CHECK(len <= size - 8, "'", path, "' is truncated or not safetensors: its header claims ", len,
             " bytes but the file has ", size - 8, " after the length");
  std::string text(len, '\0');
  f.read(text.data(), static_cast<std::streamsize>(len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    KILN_FAIL("'", path, "' has a malformed header: ", e.what());
  }
  KILN_CHECK(header.is_object(), "'", path, "' has a header that is not a JSON object");
  const uint64_t data_start = 8 + len, data_size = size - data_start;
  SafetensorsFile out;
  // Tensors in the order of their data, which is the order they were written.
  std::vector<std::pair<uint64_t, std::string>> order;
  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      for (auto& [k, v] : entry.items())
        KILN_CHECK(v.is_string(), "'", path, "': metadata value '", k, "' is not a string");
      out.metadata = entry.get<std::map<std::string, std::string>>();
      continue;
    }
    KILN_CHECK(entry.is_object() && entry.contains("data_offsets") && entry["data_offsets"].size() == 2,
               "'", path, "': entry '", name, "' has no data_offsets");
    order.emplace_back(entry["data_offsets"][0].get<uint64_t>(), name);
  }
  std::sort(order.begin(), order.end());
  for (auto& [_, name] : order) {
    const auto& e = header[name];
    DType dtype = from_st_dtype(e.at("dtype").get<std::string>(), path);
    Shape shape = e.at("shape").get<Shape>();
    uint64_t begin = e["data_offsets"][0], end = e["data_offsets"][1];
    uint64_t count = 1;
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0 && (d == 0 || count <= UINT64_MAX / static_cast<uint64_t>(d)), "'", path, "': tensor '",
                 name, "' has an invalid shape");
      count *= static_cast<uint64_t>(d);
    }
    KILN_CHECK(begin <= end && end <= data_size && end - begin == count * dtype_size(dtype), "'", path,
               "': tensor '", name, "' (", dtype_name(dtype), shape_str(shape), ") has offsets [", begin, ", ", end,
               ") that do not fit its size or the file's ", data_size, " data bytes");
    Tensor t = Tensor::empty(shape, dtype);
    f.seekg(static_cast<std::streamoff>(data_start + begin));
    f.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(end - begin));
    KILN_CHECK(f.good() || end == begin, "'", path, "': could not read tensor '", name, "'");
    out.tensors.emplace_back(name, t);
  }
  return out;
}

void save_cell(const nn::Cell& cell, const std::string& path, const std::map<std::string, std::string>& metadata) {
  NamedTensors all = cell.parameters_and_names();
  for (auto& b : cell.buffers_and_names()) all.push_back(b);
  save_safetensors(path, all, metadata);
}

void load_cell(nn::Cell& cell, const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  std::map<std::string, Tensor> in_file(file.tensors.begin(), file.tensors.end());
  NamedTensors wanted = cell.parameters_and_names();
  for (auto& b : cell.buffers_and_names()) wanted.push_back(b);
  std::vector<std::string> problems;
  for (auto& [name, t] : wanted) {
    auto it = in_file.find(name);
    if (it == in_file.end()) {
      problems.push_back("missing from the file: " + name + " " + t.meta_str());
      continue;
    }
    if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
      problems.push_back("mismatch: " + name + " is " + t.meta_str() + " in the cell but " + it->second.meta_str() +
                         " in the file");
    in_file.erase(it);
  }
  for (auto& [name, t] : in_file) problems.push_back("in the file but not in the cell: " + name + " " + t.meta_str());
  if (!problems.empty()) {
    std::string msg = "cannot load '" + path + "' into " + cell.type_name() + ": " + std::to_string(problems.size()) +
                      " problem(s); nothing was loaded";
    for (auto& p : problems) msg += "\n  " + p;
    KILN_FAIL(msg);
  }
  NoGradGuard guard;
  std::map<std::string, Tensor> values(file.tensors.begin(), file.tensors.end());
  for (auto& [name, t] : wanted) {
    Tensor dst = t;
    dst.copy_(values.at(name));
  }
}

}  // namespace kiln::io

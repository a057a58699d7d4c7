// NumPy's .npy format: "\x93NUMPY", a version, a header length, a Python
// dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), },
// then the raw elements.
#include <cstring>
#include <fstream>
#include <sstream>

#include "io/atomic_file.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

const char* npy_descr(DType d) {
  switch (d) {
    case DType::Float32: return "<f4";
    case DType::Float64: return "<f8";
    case DType::Float16: return "<f2";
    case DType::Int32: return "<i4";
    case DType::Int64: return "<i8";
    case DType::UInt8: return "|u1";
    case DType::Bool: return "|b1";
    case DType::Int8: return "|i1";
    case DType::BFloat16: break;
  }
  KILN_FAIL("save_npy: NumPy has no bfloat16; cast the tensor to float32 first");
}

// The text after `key': ` in the header dict.
std::string field(const std::string& header, const std::string& key, const std::string& what) {
  auto at = header.find("'" + key + "'");
  KILN_CHECK(at != std::string::npos, what, ": the .npy header has no '", key, "': ", header);
  auto colon = header.find(':', at);
  KILN_CHECK(colon != std::string::npos, what, ": malformed .npy header: ", header);
  size_t start = header.find_first_not_of(' ', colon + 1);
  KILN_CHECK(start != std::string::npos, what, ": malformed .npy header: ", header);
  return header.substr(start);
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  KILN_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, what,
             ": not a .npy file (it should start with \\x93NUMPY)");
  int major = static_cast<unsigned char>(bytes[6]);
  KILN_CHECK(major >= 1 && major <= 3, what, ": .npy format version ", major, " is not supported (1 to 3 are)");
  size_t len_bytes = major == 1 ? 2 : 4, header_len = 0;
  KILN_CHECK(bytes.size() >= 8 + len_bytes, what, ": the .npy file is truncated");
  for (size_t i = 0; i < len_bytes; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  size_t data_at = 8 + len_bytes + header_len;
  KILN_CHECK(data_at <= bytes.size(), what, ": the .npy header runs past the end of the file (truncated)");
  std::string header = bytes.substr(8 + len_bytes, header_len);

  std::string descr = field(header, "descr", what);
  KILN_CHECK(descr.size() >= 5 && (descr[0] == '\'' || descr[0] == '"'), what, ": malformed descr in ", header);
  descr = descr.substr(1, 3);
  DType dtype = DType::Float32;
  bool found = false;
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::Int32, DType::Int64, DType::UInt8, DType::Bool,
                  DType::Int8})
    if (descr == npy_descr(d) || (descr[0] == '=' && descr.substr(1) == std::string(npy_descr(d)).substr(1))) {
      dtype = d;
      found = true;
    }
  KILN_CHECK(found, what, ": element type '", descr, "' is not supported (float32, float64, float16, int32, int64, uint8, "
             "bool, little-endian); convert with array.astype(...)");
  KILN_CHECK(field(header, "fortran_order", what).rfind("False", 0) == 0, what,
             ": the array is in Fortran order; save it with np.ascontiguousarray(a)");
  std::string shape_text = field(header, "shape", what);
  KILN_CHECK(shape_text[0] == '(' && shape_text.find(')') != std::string::npos, what, ": malformed shape in ", header);
  Shape shape;
  std::stringstream dims(shape_text.substr(1, shape_text.find(')') - 1));
  std::string item;
  while (std::getline(dims, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    int64_t d = 0;
    try {
      d = std::stoll(item);
    } catch (const std::exception&) {
      KILN_FAIL(what, ": malformed shape in ", header);
    }
    KILN_CHECK(d >= 0, what, ": dimension ", d, " is not valid");
    shape.push_back(d);
  }
  int64_t numel = checked_numel(shape, int64_t{1} << 40);
  KILN_CHECK(numel >= 0, what, ": shape ", shape_str(shape), " is too large (over 2^40 elements); the file is malformed");
  size_t need = static_cast<size_t>(numel) * dtype_size(dtype);
  KILN_CHECK(bytes.size() - data_at == need, what, ": holds ", bytes.size() - data_at, " data bytes, but ",
             dtype_name(dtype), " ", shape_str(shape), " needs ", need, " (truncated or malformed)");
  Tensor t = Tensor::empty(shape, dtype);
  if (need) std::memcpy(t.raw_data(), bytes.data() + data_at, need);
  return t;
}

Tensor load_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  std::stringstream buffer;
  buffer << f.rdbuf();
  return parse_npy(buffer.str(), "'" + path + "'");
}

void save_npy(const std::string& path, const Tensor& t) {
  Tensor c = t.to(cpu_device()).contiguous();
  std::string header = "{'descr': '" + std::string(npy_descr(c.dtype())) + "', 'fortran_order': False, 'shape': (";
  for (int64_t d : c.shape()) header += std::to_string(d) + ", ";
  if (c.dim() > 0) header.resize(header.size() - 2);
  if (c.dim() == 1) header += ",";
  header += "), }";
  // Pad with spaces so the data starts 64-byte aligned; end with a newline.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string prefix = "\x93NUMPY";
  prefix += static_cast<char>(1);
  prefix += static_cast<char>(0);
  prefix += static_cast<char>(header.size() & 0xff);
  prefix += static_cast<char>(header.size() >> 8);
  prefix += header;
  write_file_atomic(path, {{prefix.data(), prefix.size()}, {c.raw_data(), static_cast<size_t>(c.numel()) * c.element_size()}});
}

}  // namespace kiln::io

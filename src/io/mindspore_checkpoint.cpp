// MindSpore's .ckpt files: the Checkpoint protobuf (proto/mindspore/
// checkpoint.proto), read into and written from named tensors.
#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint.pb.h"
#include "io/atomic_file.h"
#include "io/file_format.h"
#include "kiln/io.h"

namespace kiln::io {
namespace {

// MindSpore's tensor_type names for the dtypes Kiln has.
const char* ms_type(DType d) {
  switch (d) {
    case DType::Float32: return "Float32";
    case DType::Float64: return "Float64";
    case DType::Float16: return "Float16";
    case DType::BFloat16: return "BFloat16";
    case DType::Int32: return "Int32";
    case DType::Int64: return "Int64";
    case DType::UInt8: return "UInt8";
    case DType::Bool: return "Bool";
    case DType::Int8: return "Int8";
  }
  return "?";
}

DType from_ms_type(const std::string& type, const std::string& tag, const std::string& path) {
  for (DType d : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64,
                  DType::UInt8, DType::Bool, DType::Int8})
    if (type == ms_type(d)) return d;
  KILN_FAIL("'", path, "': tensor '", tag, "' is of MindSpore type ", type,
            ", which Kiln has no dtype for (it has float32/64, float16, bfloat16, int8/32/64, uint8, bool); "
            "cast it in MindSpore before saving");
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string not_a_checkpoint(const std::string& path, const std::string& bytes) {
  std::string hint = detail::foreign_format_hint(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  if (!hint.empty()) return "'" + path + "' is not a MindSpore checkpoint: " + hint;
  return "'" + path + "' is not a MindSpore checkpoint (.ckpt): it does not parse as MindSpore's Checkpoint protobuf. "
         "It may be truncated, or encrypted (saved with enc_key): load it in MindSpore with dec_key and dec_mode "
         "and save it again without encryption";
}

}  // namespace

bool is_mindspore_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open '", path, "'");
  std::string head(16, '\0');
  f.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(f.gcount()));
  if (head.size() > 8 && head[8] == '{') return false;  // safetensors: an 8-byte length, then its JSON header
  // torch.save's zip and pickle forms (PyTorch Lightning names its files .ckpt too).
  if (head.compare(0, 4, "PK\x03\x04") == 0 || (!head.empty() && static_cast<uint8_t>(head[0]) == 0x80)) return false;
  const bool named = path.size() >= 5 && path.compare(path.size() - 5, 5, ".ckpt") == 0;
  // Field 1 (value), length-delimited: every Checkpoint message starts so.
  return named || (!head.empty() && static_cast<uint8_t>(head[0]) == 0x0a);
}

MindsporeCheckpoint load_mindspore_checkpoint(const std::string& path) {
  const std::string bytes = read_all(path);
  KILN_CHECK(!bytes.empty(), "'", path, "' is empty: not a MindSpore checkpoint");
  KILN_CHECK(bytes.size() < INT32_MAX, "'", path, "' is larger than 2 GiB, the most a protobuf message may hold; ",
             "save it in MindSpore's safetensors form (save_checkpoint(..., format='safetensors'))");
  kiln_mindspore_ckpt::Checkpoint ckpt;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(INT32_MAX);
  KILN_CHECK(ckpt.ParseFromCodedStream(&in) && in.ConsumedEntireMessage(), not_a_checkpoint(path, bytes));

  MindsporeCheckpoint out;
  std::set<std::string> seen;
  // A large tensor is saved as consecutive values under one tag, each a
  // slice of its data with the whole tensor's dims: they are joined here.
  for (int i = 0; i < ckpt.value_size();) {
    const auto& first = ckpt.value(i);
    const std::string& tag = first.tag();
    std::string data = first.tensor().tensor_content();
    int j = i + 1;
    for (; j < ckpt.value_size() && ckpt.value(j).tag() == tag; ++j) {
      KILN_CHECK(ckpt.value(j).tensor().tensor_type() == first.tensor().tensor_type(), "'", path, "': the slices of '",
                 tag, "' disagree on their type");
      data += ckpt.value(j).tensor().tensor_content();
    }
    i = j;
    const auto& proto = first.tensor();
    if (proto.tensor_type() == "str") {  // a string saved with the weights (append_dict)
      out.strings[tag] = data;
      continue;
    }
    Shape shape(proto.dims().begin(), proto.dims().end());
    // MindSpore writes a scalar's dims as [0] in older versions: it holds one value.
    if (shape == Shape{0} && !data.empty()) shape = {};
    int64_t numel = 1;
    for (int64_t d : shape) {
      KILN_CHECK(d >= 0 && d < (int64_t{1} << 40), "'", path, "': tensor '", tag, "' has a bad dimension ", d);
      numel *= d;
      KILN_CHECK(numel < (int64_t{1} << 40), "'", path, "': tensor '", tag, "' is absurdly large");
    }
    const DType dtype = from_ms_type(proto.tensor_type(), tag, path);
    const size_t want = static_cast<size_t>(numel) * dtype_size(dtype);
    KILN_CHECK(data.size() == want, "'", path, "': tensor '", tag, "' (", proto.tensor_type(), shape_str(shape),
               ") should hold ", want, " bytes but holds ", data.size(),
               data.size() < want ? ": the file is truncated, or the tensor is a slice of a distributed model (merge the "
                                    "slices in MindSpore with merge_sliced_parameter or transform_checkpoints)"
                                  : "");
    KILN_CHECK(seen.insert(tag).second, "'", path, "': tensor '", tag, "' appears twice, apart");
    Tensor t = Tensor::empty(shape, dtype);
    if (want) std::memcpy(t.raw_data(), data.data(), want);
    out.tensors.emplace_back(tag, t);
  }
  KILN_CHECK(!out.tensors.empty() || !out.strings.empty(), "'", path, "' holds no tensors");
  return out;
}

void save_mindspore_checkpoint(const std::string& path, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& strings) {
  kiln_mindspore_ckpt::Checkpoint ckpt;
  std::map<std::string, int> seen;
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(seen[name]++ == 0, "tensor name '", name, "' appears twice");
    Tensor c = t.detach().to(cpu_device()).contiguous();
    auto* v = ckpt.add_value();
    v->set_tag(name);
    auto* proto = v->mutable_tensor();
    for (int64_t d : c.shape()) proto->add_dims(d);
    if (c.dim() == 0) proto->add_dims(0);  // MindSpore's form of a scalar
    proto->set_tensor_type(ms_type(c.dtype()));
    proto->set_tensor_content(c.raw_data(), static_cast<size_t>(c.numel()) * c.element_size());
  }
  for (const auto& [name, s] : strings) {
    KILN_CHECK(seen[name]++ == 0, "name '", name, "' is both a tensor and a string");
    auto* v = ckpt.add_value();
    v->set_tag(name);
    v->mutable_tensor()->set_tensor_type("str");
    v->mutable_tensor()->set_tensor_content(s);
  }
  KILN_CHECK(ckpt.ByteSizeLong() < INT32_MAX, "'", path, "': ", ckpt.ByteSizeLong(),
             " bytes is more than one protobuf message holds (2 GiB); save it as safetensors instead");
  const std::string bytes = ckpt.SerializeAsString();
  write_file_atomic(path, {{bytes.data(), bytes.size()}});
}

}  // namespace kiln::io

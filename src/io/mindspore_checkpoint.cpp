// MindSpore's .ckpt files: the Checkpoint protobuf (proto/mindspore/
// checkpoint.proto), read into and written from named tensors.
#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <vector>

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

namespace {

// One tensor (or string) as its values arrive: the first value's type and
// dims, and the data of every slice so far.
struct Pending {
  std::string tag, type;
  Shape dims;
  std::string data;
};

void finish(Pending& p, const std::string& path, MindsporeCheckpoint& out, std::set<std::string>& seen) {
  KILN_CHECK(seen.insert(p.tag).second, "'", path, "': tensor '", p.tag, "' appears twice, apart");
  if (p.type == "str") {  // a string saved with the weights (append_dict)
    out.strings[p.tag] = std::move(p.data);
    return;
  }
  Shape shape = p.dims;
  // MindSpore writes a scalar's dims as [0]: it holds one value.
  if (shape == Shape{0} && !p.data.empty()) shape = {};
  int64_t numel = 1;
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0 && d < (int64_t{1} << 40), "'", path, "': tensor '", p.tag, "' has a bad dimension ", d);
    numel *= d;
    KILN_CHECK(numel < (int64_t{1} << 40), "'", path, "': tensor '", p.tag, "' is absurdly large");
  }
  const DType dtype = from_ms_type(p.type, p.tag, path);
  const size_t want = static_cast<size_t>(numel) * dtype_size(dtype);
  KILN_CHECK(p.data.size() == want, "'", path, "': tensor '", p.tag, "' (", p.type, shape_str(shape), ") should hold ",
             want, " bytes but holds ", p.data.size(),
             p.data.size() < want ? ": the file is truncated, or the tensor is a slice of a distributed model (merge the "
                                    "slices in MindSpore with merge_sliced_parameter or transform_checkpoints)"
                                  : "");
  Tensor t = Tensor::empty(shape, dtype);
  if (want) std::memcpy(t.raw_data(), p.data.data(), want);
  out.tensors.emplace_back(p.tag, t);
}

}  // namespace

MindsporeCheckpoint load_mindspore_checkpoint(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KILN_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_it{fd};
  std::string head(16, '\0');
  head.resize(static_cast<size_t>(std::max<ssize_t>(0, ::pread(fd, head.data(), head.size(), 0))));
  KILN_CHECK(!head.empty(), "'", path, "' is empty: not a MindSpore checkpoint");
  auto refuse = [&] { KILN_FAIL(not_a_checkpoint(path, head)); };

  // The file is a run of Checkpoint messages, one per value (MindSpore
  // writes a large tensor's slices as values of their own, under its tag):
  // read value by value, so no single protobuf limit applies to the file.
  google::protobuf::io::FileInputStream raw(fd);
  MindsporeCheckpoint out;
  std::set<std::string> seen;
  Pending pending;
  bool have = false;
  for (;;) {
    google::protobuf::io::CodedInputStream in(&raw);
    const uint32_t tag = in.ReadTag();
    if (tag == 0) {  // the end, or bytes that are no field at all
      if (!in.ConsumedEntireMessage()) refuse();
      break;
    }
    uint32_t length = 0;
    if (tag != ((1u << 3) | 2u) || !in.ReadVarint32(&length) || length > (1u << 31) - 1) refuse();
    in.SetTotalBytesLimit(static_cast<int>(std::min<uint64_t>(uint64_t{length} + 16, INT32_MAX)));
    const auto limit = in.PushLimit(static_cast<int>(length));
    kiln_mindspore_ckpt::Checkpoint::Value value;
    // (Partial, then checked: protobuf would log a missing required field.)
    if (!value.ParsePartialFromCodedStream(&in) || !value.IsInitialized() || !in.ConsumedEntireMessage() ||
        in.BytesUntilLimit() != 0)
      refuse();
    in.PopLimit(limit);
    if (have && value.tag() == pending.tag) {  // the next slice of the same tensor
      KILN_CHECK(value.tensor().tensor_type() == pending.type, "'", path, "': the slices of '", pending.tag,
                 "' disagree on their type");
      pending.data += value.tensor().tensor_content();
      continue;
    }
    if (have) finish(pending, path, out, seen);
    pending = {value.tag(), value.tensor().tensor_type(), Shape(value.tensor().dims().begin(), value.tensor().dims().end()),
               std::move(*value.mutable_tensor()->mutable_tensor_content())};
    have = true;
  }
  if (raw.GetErrno() != 0) KILN_FAIL("cannot read '", path, "': ", std::strerror(raw.GetErrno()));
  if (!have) refuse();
  finish(pending, path, out, seen);
  return out;
}

void save_mindspore_checkpoint(const std::string& path, const NamedTensors& tensors,
                               const std::map<std::string, std::string>& strings) {
  // As MindSpore writes them: one Checkpoint message per value, a tensor
  // over 512 MiB in slices of whole elements (MindSpore's loader joins them).
  constexpr size_t kSlice = size_t{512} << 20;
  std::vector<std::string> messages;
  std::map<std::string, int> seen;
  auto add = [&](const std::string& name, const std::vector<int64_t>& dims, const std::string& type, const char* data,
                 size_t bytes, size_t element) {
    const size_t step = std::max(element, kSlice / element * element);
    size_t at = 0;
    do {
      kiln_mindspore_ckpt::Checkpoint message;
      auto* v = message.add_value();
      v->set_tag(name);
      for (int64_t d : dims) v->mutable_tensor()->add_dims(d);
      v->mutable_tensor()->set_tensor_type(type);
      const size_t n = std::min(step, bytes - at);
      v->mutable_tensor()->set_tensor_content(data + at, n);
      at += n;
      messages.push_back(message.SerializeAsString());
    } while (at < bytes);
  };
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(seen[name]++ == 0, "tensor name '", name, "' appears twice");
    Tensor c = t.detach().to(cpu_device()).contiguous();
    std::vector<int64_t> dims(c.shape().begin(), c.shape().end());
    if (dims.empty()) dims = {0};  // MindSpore's form of a scalar
    add(name, dims, ms_type(c.dtype()), static_cast<const char*>(c.raw_data()),
        static_cast<size_t>(c.numel()) * c.element_size(), c.element_size());
  }
  for (const auto& [name, text] : strings) {
    KILN_CHECK(seen[name]++ == 0, "name '", name, "' is both a tensor and a string");
    add(name, {}, "str", text.data(), text.size(), 1);
  }
  ByteChunks chunks;
  for (const auto& m : messages) chunks.emplace_back(m.data(), m.size());
  write_file_atomic(path, chunks);
}

}  // namespace kiln::io
